"""Small shared helpers: atomic JSON writes, time, the JSON object type.

orchestra never writes through a link (a job folder made elsewhere is input, issue 56):
`write_atomic` writes a temporary name in the folder and renames it, and refuses a link
where it would write; `open_no_link` opens with O_NOFOLLOW. Both raise InputError naming
the link (exit 2), its target untouched."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, TypeAlias

from pydantic import BaseModel

from orchestrator.errors import InputError

# A JSON object whose shape belongs to someone else: a model API's request or reply, the
# engine's answer, a line of an agent's log. Where orchestra owns the shape, a model does.
JsonObject: TypeAlias = dict[str, Any]


def _link_refused(path: Path) -> InputError:
    return InputError(f"{path}: a link where orchestra writes; refused (orchestra never writes "
                      "through a link: a job folder made elsewhere is input; remove the link)")


def open_no_link(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open with O_NOFOLLOW: a file descriptor, or InputError when `path` is a link."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise _link_refused(path) from None
        raise


def write_atomic(path: Path, data: str | bytes) -> None:
    """The one way orchestra replaces a file: a temp file in the same folder, fsync,
    rename. A reader sees the old content or the new, never half of it. A link at `path`
    is refused (InputError), never replaced or followed."""
    if path.is_symlink():
        raise _link_refused(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, data: BaseModel | JsonObject | list[Any]) -> None:
    """A model or plain data as indented JSON, replaced atomically (write_atomic)."""
    text = data.model_dump_json(indent=2) if isinstance(data, BaseModel) else json.dumps(
        data, indent=2, sort_keys=True, default=str
    )
    write_atomic(path, text + "\n")


SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def check_job_name(name: str) -> str | None:
    """A job name is one safe path segment; returns why not, or None."""
    if not SAFE_NAME.match(name) or name in (".", ".."):
        return (f"{name!r} is not one safe folder name (letters, digits, '.', '_', '+', '-'; "
                "no '/', no '..', at most 128 characters)")
    return None


_REGISTRY = re.compile(r"^(?P<host>[A-Za-z0-9.-]+(?::[0-9]{1,5})?)(?P<prefix>(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)/?$")


def registry_problem(registry: str) -> str | None:
    """`--registry HOST[:PORT]/PREFIX`: why it is not one, or None. The host must read as a
    registry's (a dot, a port or localhost), or Docker would take it for a Docker Hub user."""
    match = _REGISTRY.match(registry)
    if match is None:
        return (f"{registry!r} is not HOST[:PORT]/PREFIX (a registry host, then lowercase path "
                "segments of letters, digits, '.', '_', '-')")
    host = match.group("host")
    if "." not in host and ":" not in host and host != "localhost":
        return (f"{registry!r}: {host!r} is not a registry host (it needs a dot, a port or to be "
                "localhost; Docker would read it as a Docker Hub namespace)")
    return None


def write_output(path: Path | str, data: BaseModel | JsonObject | list[Any] | str) -> None:
    """A user-named output (`--json`, `--markdown`): `-` means stdout; an existing path that
    is not a regular file (a device, a pipe, /dev/stdout) is written in place, never
    replaced; a regular file is replaced atomically."""
    text = data.model_dump_json(indent=2) if isinstance(data, BaseModel) else (
        data if isinstance(data, str) else json.dumps(data, indent=2, sort_keys=True, default=str))
    if str(path) == "-":
        sys.stdout.write(text.rstrip("\n") + "\n")
        sys.stdout.flush()
        return
    path = Path(path)
    if path.exists() and not path.is_file() or path.is_symlink():
        with open(path, "w") as handle:  # follow it; never replace what we did not create
            handle.write(text.rstrip("\n") + "\n")
        return
    if isinstance(data, str):
        write_atomic(path, text)
        return
    write_json_atomic(path, data)
