"""A task folder is untrusted input (DESIGN 4): it is read without following links out of
it, and its TOML and YAML are parsed under caps so that no file can make the loader recurse
or expand without limit. Every refusal is a problem naming the file (InputError, exit 2).

- `links_out(folder)`: every link in the folder whose target is absolute, resolves outside
  the folder, or reaches /proc, /dev or /sys (links that stay inside are kept: Harbor copies
  them); a folder of more than MAX_TASK_ENTRIES files and folders, or nested more than
  MAX_FOLDER_DEPTH deep, is refused by its count.
- `read_capped(path, limit)`: a file's text, refused above `limit` bytes before it is read.
- `search_file(path, pattern)`: a regex's first match in a file read a chunk at a time.
- `load_toml(path, limit)`: tomllib under a size cap, UTF-8, and a linear scan first that
  bounds what tomllib would pay (issue 56): nesting with dotted keys counted (a 100 KB key of
  20,000 parts cost tomllib 46 s and 9.8 GB), key count and length, a bare value's length
  (Python reads no integer past 4,300 digits).
- `load_yaml(text, path)`: YAML without aliases (a 0.5 kB file of nested aliases expands to
  gigabytes), with a nesting cap, at most MAX_YAML_NODES values (PyYAML's parser took 8.5 s
  over a 585 KB list) and numbers of at most MAX_WORD_CHARS characters.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from orchestrator.errors import InputError

MAX_TOML_BYTES = 1024 * 1024  # task.toml
MAX_SEEDS_BYTES = 16 * 1024 * 1024  # memory/seeds.toml (values up to 64 kB each)
MAX_YAML_BYTES = 1024 * 1024  # a compose file, a fact file
MAX_FOLDER_DEPTH = 64  # folders nested in a task folder (Python's walks recurse)
MAX_TASK_ENTRIES = 100_000  # files and folders in one task folder (100,000: ~9 s to load)
MAX_DEPTH = 32  # nesting of tables, arrays, mappings (dotted keys count): Harbor's deepest is 4
MAX_KEYS = 20_000  # keys and table headers in one TOML file (tomllib: ~1.5 s at 20,000)
MAX_VALUES = 200_000  # values in one TOML file, arrays' items included (tomllib: ~0.6 s)
MAX_YAML_NODES = 20_000  # values (mappings, lists, scalars, keys) in one YAML file (~0.6 s)
MAX_KEY_CHARS = 1024  # one key, dotted parts and quotes included
MAX_WORD_CHARS = 100  # a bare value (a number, a date, true): Python reads at most 4,300 digits
_HOST_TREES = ("/proc", "/dev", "/sys")
_BARE = re.compile(r"[A-Za-z0-9_+\-:.]+")  # a bare value: number, date, boolean
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SPACE = re.compile(r"[ \t\r]+")
_STRINGS = {'"""': re.compile(r'"""(?:[^"\\]++|\\.|"(?!""))*+"""', re.S),
            "'''": re.compile(r"'''.*?'''", re.S),
            '"': re.compile(r'"(?:[^"\\\n]++|\\.)*+"'),
            "'": re.compile(r"'[^'\n]*+'")}


def links_out(folder: Path) -> list[str]:
    """Problems, one per link under `folder` that leaves it (nothing is followed); past
    MAX_TASK_ENTRIES files and folders or MAX_FOLDER_DEPTH nested folders, that one problem
    (the walk stops there, before anything is hashed; it is iterative: os.walk recursed,
    and 1,500 nested folders were a RecursionError)."""
    root = folder.resolve()
    problems = []
    entries = 0
    todo = [(root, 0)]
    while todo:
        here, depth = todo.pop()
        try:
            with os.scandir(here) as listing:
                found = list(listing)
        except OSError:
            continue
        entries += len(found)
        if entries > MAX_TASK_ENTRIES:
            return [f"{folder}: more than {MAX_TASK_ENTRIES} files and folders; the limit is "
                    f"{MAX_TASK_ENTRIES}"]
        for entry in found:
            path = Path(entry.path)
            if entry.is_symlink():
                target = os.readlink(path)
                why = _leaves(root, path, target)
                if why:
                    problems.append(f"{path}: a link to {target} {why}; a task folder is read "
                                    "without following links out of it (copy the file in)")
            elif entry.is_dir(follow_symlinks=False):
                if depth + 1 > MAX_FOLDER_DEPTH:
                    return [f"{here}: folders nested more than {MAX_FOLDER_DEPTH} deep; the limit "
                            f"is {MAX_FOLDER_DEPTH}"]
                todo.append((path, depth + 1))
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


def search_file(path: Path, pattern: re.Pattern[str], chunk: int = 1024 * 1024) -> re.Match[str] | None:
    """The first match of `pattern` in a file read a chunk at a time (a 256 MiB script costs
    one chunk, not the file), each chunk searched with the last 256 characters of the one
    before so a match split across two is found; undecodable bytes replaced."""
    tail = ""
    with open(path, "rb") as handle:
        while data := handle.read(chunk):
            text = tail + data.decode(errors="replace")
            if found := pattern.search(text):
                return found
            tail = text[-256:]
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
    _toml_cost(path, text)  # linear, before tomllib (quadratic in a dotted key's parts)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    except ValueError as exc:  # a value Python cannot read (the scan should have said)
        raise InputError(f"{path}: a value orchestra cannot read: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: values nested too deep to parse; the limit is {MAX_DEPTH}") from None
    where = _too_deep(data)
    if where is not None:
        raise InputError(f"{path}: field '{where}': nested more than {MAX_DEPTH} deep")
    return data


def _toml_cost(path: Path, text: str) -> None:
    """Refuse, before tomllib reads it, a TOML text that would cost it more than linear time
    or memory, or that Python cannot turn into values: deeper than MAX_DEPTH (brackets and
    dotted keys counted together, as the parsed value would nest), more than MAX_KEYS keys or
    MAX_VALUES values, a key longer than MAX_KEY_CHARS, a bare value longer than
    MAX_WORD_CHARS. One pass in linear time; an unterminated string ends it (tomllib then
    refuses the file)."""
    n = len(text)
    i = keys = values = 0
    table = 0  # the depth of the current [table] header's values' parent
    stack: list[tuple[str, int]] = []  # open '[' / '{' and the depth of the value they make
    in_key, line_start, header = True, True, 0  # header: 0, or 1 for [, 2 for [[
    parts, key_from, value_depth, table_name = 1, 0, 0, ""
    while i < n:
        c = text[i]
        if c in "\"'":
            quote = text[i:i + 3] if text.startswith(c * 3, i) else c
            found = _STRINGS[quote].match(text, i)
            if found is None:
                return  # not valid TOML: tomllib says where
            i = found.end()
            if not in_key:
                values += 1
                _value_depth(path, text, i, value_depth)
            for _ in range(2 if len(quote) == 3 else 0):  # """a"""" ends in up to two more quotes
                i += i < n and text[i] == c
            line_start = False
            continue
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c in " \t\r":
            space = _SPACE.match(text, i)
            i = space.end() if space else i + 1
            continue
        if c == "\n":
            if not stack:
                in_key, line_start, header, parts = True, True, 0, 1
            i += 1
            key_from = i
            continue
        if in_key:
            if c == "[" and line_start and not stack:
                header = 2 if text.startswith("[[", i) else 1
                i += header
                key_from, parts = i, 1
                line_start = False
                continue
            if c == "]" and header:
                keys += 1
                if keys > MAX_KEYS:
                    raise InputError(f"{path}: more than {MAX_KEYS} keys; the limit is {MAX_KEYS}")
                table = parts + (1 if header == 2 else 0)
                table_name = text[key_from:i].strip()[:64] + "."
                _key_bounds(path, text, key_from, i, parts, table)
                i += header
                header = 0
                continue
            if c == ".":
                parts += 1
                if parts > MAX_DEPTH:
                    key = (table_name if not stack else "") + text[key_from:i].strip()[:64]
                    raise InputError(f"{path}: field '{key}...': a dotted key of more than {MAX_DEPTH} "
                                     f"parts at line {_line(text, i)}; the limit is {MAX_DEPTH}")
            elif c == "=":
                keys += 1
                if keys > MAX_KEYS:
                    raise InputError(f"{path}: more than {MAX_KEYS} keys; the limit is {MAX_KEYS}")
                value_depth = (stack[-1][1] if stack else table) + parts
                _key_bounds(path, text, key_from, i, parts, value_depth)
                in_key = False
            elif c == "}" and stack and stack[-1][0] == "{":  # an empty inline table
                stack.pop()
                in_key = False
            elif (word := _BARE_KEY.match(text, i)) is not None:
                line_start = False
                i = word.end()
                continue
            line_start = False
            i += 1
            continue
        # a value
        if c not in "]},":
            values += 1
            if values > MAX_VALUES:
                raise InputError(f"{path}: more than {MAX_VALUES} values; the limit is {MAX_VALUES}")
        if c in "[{":
            _value_depth(path, text, i, value_depth)  # the container itself; items when seen
            stack.append((c, value_depth))
            if c == "[":
                value_depth += 1
            else:
                in_key, key_from, parts = True, i + 1, 1
        elif c in "]}" and stack:
            stack.pop()
        elif c == "," and stack:
            if stack[-1][0] == "[":
                value_depth = stack[-1][1] + 1
            else:
                in_key, key_from, parts = True, i + 1, 1
        elif (word := _BARE.match(text, i)) is not None:
            _value_depth(path, text, i, value_depth)
            if len(word.group()) > MAX_WORD_CHARS:
                raise InputError(f"{path}: a value of {len(word.group())} characters at line "
                                 f"{_line(text, i)} (Python reads no number past 4,300 digits); "
                                 f"the limit is {MAX_WORD_CHARS}")
            i = word.end()
            continue
        i += 1


def _key_bounds(path: Path, text: str, start: int, end: int, parts: int, depth: int) -> None:
    if end - start > MAX_KEY_CHARS:
        raise InputError(f"{path}: a key of {end - start} characters at line {_line(text, start)}; "
                         f"the limit is {MAX_KEY_CHARS}")
    if depth > MAX_DEPTH:
        raise InputError(f"{path}: values nested more than {MAX_DEPTH} deep at line {_line(text, start)} "
                         f"(dotted keys and tables counted); the limit is {MAX_DEPTH}")


def _value_depth(path: Path, text: str, at: int, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InputError(f"{path}: values nested more than {MAX_DEPTH} deep at line "
                         f"{_line(text, at)}; the limit is {MAX_DEPTH}")


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


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
        depth = nodes = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise InputError(f"{path}: line {event.start_mark.line + 1}: a YAML alias "
                                 f"(*{event.anchor}); aliases are not accepted in task files "
                                 "(write the value out)")
            self.depth += 1
            self.nodes += 1
            if self.nodes > MAX_YAML_NODES:  # each costs PyYAML's pure-Python parser ~30 us
                mark = self.peek_event().start_mark
                raise InputError(f"{path}: line {mark.line + 1}: more than {MAX_YAML_NODES} values; "
                                 f"the limit is {MAX_YAML_NODES}")
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise InputError(f"{path}: line {mark.line + 1}: nested more than {MAX_DEPTH} deep")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def bounded_int(self, node: Any) -> Any:
            if len(node.value) > MAX_WORD_CHARS:  # Python reads no number past 4,300 digits
                raise InputError(f"{path}: line {node.start_mark.line + 1}: a number of "
                                 f"{len(node.value)} characters; the limit is {MAX_WORD_CHARS}")
            return self.construct_yaml_int(node)

    Bounded.add_constructor("tag:yaml.org,2002:int", Bounded.bounded_int)
    loader = Bounded(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not readable YAML: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deep to parse; the limit is {MAX_DEPTH}") from None
    except ValueError as exc:  # a value Python cannot read
        raise InputError(f"{path}: a value orchestra cannot read: {exc}") from None
    finally:
        loader.dispose()
