"""A task's Dockerfile, as the engine's classic builder can build it.

docker-py drives the Engine API's classic builder (it has no BuildKit session), and the
classic builder refuses BuildKit-only flags that Harbor datasets use because Harbor builds
with the docker CLI: `COPY --chmod=755 entrypoint.sh /entrypoint.sh` fails with "the
--chmod option requires BuildKit" (15 of Harbor's 32 example tasks that run here). Each
such line is rewritten to what it means: the COPY (or ADD) without --chmod, then
`RUN chmod -R MODE` of what it copied, as root. The task's files are unchanged; only the
Dockerfile sent in the build context differs, and the rewrite is logged with the trial.

A FROM reference is read with the global ARGs' defaults (`global_args`, `expand_args`):
`ARG BASE=python:3.12` then `FROM ${BASE}` starts from python:3.12, not from `${BASE}`.

Every reader of a task's Dockerfile goes through `read_dockerfile`: at most
MAX_DOCKERFILE_BYTES (its size checked before a byte is read, so a 256 MiB Dockerfile costs
no 256 MiB) and UTF-8, else InputError naming the file and the limit (checked at load).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from pathlib import Path

from orchestrator.tasks.inputs import read_capped

MAX_DOCKERFILE_BYTES = 1024 * 1024  # Harbor's largest is a few kB

_CHMOD = re.compile(r"\s--chmod=(\S+)")
_USER = re.compile(r"^\s*USER\s+(\S+)", re.IGNORECASE)
_FROM = re.compile(r"^\s*FROM\s", re.IGNORECASE)


def read_dockerfile(path: Path) -> str:
    """A task's Dockerfile (or tests/Dockerfile): InputError above MAX_DOCKERFILE_BYTES or
    when not UTF-8, naming the file."""
    return read_capped(path, MAX_DOCKERFILE_BYTES)


_ARG = re.compile(r"^\s*ARG\s+(.+)$", re.IGNORECASE)
_FROM_LINE = re.compile(r"^\s*FROM\s", re.IGNORECASE)
_ARG_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:=(\"(?:[^\"\\\\]|\\\\.)*\"|'[^']*'|\S*))?")
_ARG_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def global_args(dockerfile: str) -> dict[str, str]:
    """The ARGs declared before the first FROM, with their defaults: the only ones a FROM
    line can read (Docker's rule; orchestra passes no build arguments). One without a
    default reads as empty."""
    args: dict[str, str] = {}
    for line in joined_lines(dockerfile):
        if _FROM_LINE.match(line):
            break
        if match := _ARG.match(line):
            for name, default in _ARG_WORD.findall(match.group(1)):
                value = default[1:-1] if default[:1] in "\"'" and len(default) > 1 else default
                args[name] = _substitute(value, args)  # an ARG's default reads the ones before
    return args


def expand_args(text: str, args: dict[str, str]) -> str:
    """`$NAME`, `${NAME}` and `${NAME:-default}` in a FROM reference, as the builder reads
    them from the global ARGs (an unset or empty one takes its default, else empty)."""
    return _substitute(text, args) or text  # nothing: the reference as written (the build says so)


def _substitute(text: str, args: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        return args.get(name) or (match.group(2) or "")

    return _ARG_REF.sub(value, text) if "$" in text else text


def joined_lines(dockerfile: str) -> list[str]:
    """Dockerfile lines with backslash continuations joined."""
    return re.sub(r"\\\n", " ", dockerfile).splitlines()


def for_classic_builder(dockerfile: str) -> tuple[str, list[str]]:
    """The Dockerfile without BuildKit-only COPY/ADD --chmod, and what was rewritten (the
    text as it was when there is nothing to rewrite)."""
    if "--chmod" not in dockerfile:
        return dockerfile, []
    out: list[str] = []
    notes: list[str] = []
    user: str | None = None
    for line in joined_lines(dockerfile):
        if _FROM.match(line):
            user = None
        elif match := _USER.match(line):
            user = match.group(1)
        words = line.split()
        chmod = _CHMOD.search(line)
        if not words or words[0].upper() not in ("COPY", "ADD") or chmod is None or "[" in line:
            out.append(line)
            continue
        mode = chmod.group(1)
        plain = _CHMOD.sub("", line, count=1)
        args = [w for w in plain.split()[1:] if not w.startswith("--")]
        if len(args) < 2:
            out.append(line)
            continue
        sources, dest = args[:-1], args[-1]
        into_dir = dest.endswith("/") or len(sources) > 1
        targets = [posixpath.join(dest, posixpath.basename(s.rstrip("/"))) for s in sources] if into_dir else [dest]
        run = f"RUN chmod -R {mode} " + " ".join(t if "*" in t or "?" in t else shlex.quote(t) for t in targets)
        out.append(plain)
        if user not in (None, "root", "0"):
            out.extend(["USER root", run, f"USER {user}"])
        else:
            out.append(run)
        notes.append(f"{line.strip()} -> {plain.strip()}; {run}")
    return "\n".join(out) + "\n", notes
