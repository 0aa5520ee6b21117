"""A task folder is untrusted input (DESIGN 4): it is read without following links out of
it, and its TOML and YAML are parsed under caps so that no file can make the loader recurse
or expand without limit. Every refusal is a problem naming the file (InputError, exit 2).

- `links_out(folder)`: every link in the folder whose target is absolute, resolves outside
  the folder, or reaches /proc, /dev or /sys (links that stay inside are kept: Harbor copies
  them).
- `read_capped(path, limit)`: a file's text, refused above `limit` bytes before it is read.
- `load_toml(path, limit)`: tomllib under a size cap, a nesting cap (a 100,000-deep array is
  a problem, not a RecursionError) and UTF-8.
- `load_yaml(text, path)`: YAML without aliases (a 0.5 kB file of nested aliases expands to
  gigabytes) and with a nesting cap.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from orchestrator.errors import InputError

MAX_DEPTH = 32  # nesting of tables, arrays, mappings: Harbor's deepest is 4
MAX_TOML_BYTES = 1024 * 1024  # task.toml
MAX_SEEDS_BYTES = 16 * 1024 * 1024  # memory/seeds.toml (values up to 64 kB each)
MAX_YAML_BYTES = 1024 * 1024  # a compose file, a fact file
_HOST_TREES = ("/proc", "/dev", "/sys")


def links_out(folder: Path) -> list[str]:
    """Problems, one per link under `folder` that leaves it (nothing is followed)."""
    root = folder.resolve()
    problems = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                continue
            target = os.readlink(path)
            why = _leaves(root, path, target)
            if why:
                problems.append(f"{path}: a link to {target} {why}; a task folder is read "
                                "without following links out of it (copy the file in)")
    return problems


def _leaves(root: Path, link: Path, target: str) -> str | None:
    if os.path.isabs(target):
        return "is absolute"
    try:
        resolved = (link.parent / target).resolve()
    except (OSError, RuntimeError):  # a loop
        return "does not resolve (a loop)"
    if any(str(resolved) == t or str(resolved).startswith(t + "/") for t in _HOST_TREES):
        return "reaches a host filesystem"
    if os.path.commonpath([root, resolved]) != str(root):
        return "leaves the task folder"
    return None


def read_capped(path: Path, limit: int) -> str:
    """The file's UTF-8 text; InputError when it is larger than `limit` bytes (checked on
    the open file, before reading) or not UTF-8."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise InputError(f"{path}: {size} bytes; the limit is {limit}")
        data = handle.read(limit + 1)
    if len(data) > limit:  # grew while being read
        raise InputError(f"{path}: more than {limit} bytes; the limit is {limit}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def load_toml(path: Path, limit: int = MAX_TOML_BYTES) -> dict[str, Any]:
    """tomllib, bounded: InputError naming the file for too large, too deep, or invalid."""
    text = read_capped(path, limit)
    deepest = _bracket_depth(text)
    if deepest > MAX_DEPTH:
        raise InputError(f"{path}: values nested {deepest} deep; the limit is {MAX_DEPTH}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: values nested too deep to parse; the limit is {MAX_DEPTH}") from None
    where = _too_deep(data)
    if where is not None:
        raise InputError(f"{path}: field '{where}': nested more than {MAX_DEPTH} deep")
    return data


def _bracket_depth(text: str) -> int:
    """The deepest nesting of [ and { in the text, outside strings and comments: an upper
    bound on the value depth a TOML parser would recurse to (cheap, one pass)."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            triple = text.startswith(c * 3, i)
            close = c * 3 if triple else c
            j = i + len(close)
            while j < n and not text.startswith(close, j):
                if c == '"' and text[j] == "\\":
                    j += 1
                elif text[j] == "\n" and not triple:
                    break
                j += 1
            i = j + len(close)
            continue
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def _too_deep(value: object, limit: int = MAX_DEPTH) -> str | None:
    """The dotted path of the first value nested deeper than `limit`, else None (iterative)."""
    todo: list[tuple[object, str, int]] = [(value, "", 0)]
    while todo:
        item, where, depth = todo.pop()
        if depth > limit:
            return where or "(top)"
        if isinstance(item, dict):
            todo.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in item.items())
        elif isinstance(item, list):
            todo.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
    return None


def load_yaml(text: str, path: Path) -> Any:
    """yaml.safe_load without aliases and with nesting capped: InputError naming the file."""
    import yaml  # only tasks with YAML need it

    class Bounded(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise InputError(f"{path}: line {event.start_mark.line + 1}: a YAML alias "
                                 f"(*{event.anchor}); aliases are not accepted in task files "
                                 "(write the value out)")
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise InputError(f"{path}: line {mark.line + 1}: nested more than {MAX_DEPTH} deep")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = Bounded(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not readable YAML: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deep to parse; the limit is {MAX_DEPTH}") from None
    finally:
        loader.dispose()
