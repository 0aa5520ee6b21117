"""Defects a task folder carries itself, seen without running it (issue 44): what the
doctor names as the task's own, not the environment's, when the oracle fails.

- A script that solve.sh or a Dockerfile RUN line runs directly (`./setup.sh`,
  `/app/run.sh`, `exec tool.sh`) which the task ships without its run bit: `bash solve.sh`
  works, but `./setup.sh` inside it is "Permission denied", here as under Harbor (both copy
  the folder as it is). Committed without `chmod +x` is the usual cause.
- A step's solution that reaches outside its own folder: Harbor uploads only that step's
  solution/ to /solution, so a path under /solution that the step does not ship, or a
  `../` out of it, exists only when the steps are read as one folder.

Every check reads files of the task folder only, never following a link out of it, and its
work is bounded whatever the task holds (issue 56): each folder is listed once, at most
MAX_LISTED entries, and a COPY source is matched against that list segment by segment (`**`
repeated costs what one does: pathlib's glob took 34 s over five of them), at most
MAX_MATCHES path matches a task, MAX_COMMANDS commands a script; past a bound nothing more
is claimed as a defect.
"""

from __future__ import annotations

import os
import re
import shlex
from fnmatch import fnmatchcase
from pathlib import Path

from orchestrator.tasks.dockerfile import joined_lines
from orchestrator.tasks.load import Task

# `./x`, `/abs/x` or a bare `x.sh` as the first word of a command (after ;, &&, ||, |, a
# newline, `exec`, `then`, `do`, `sudo`, `env VAR=...`), not an argument to an interpreter
_COMMAND = re.compile(r"(?:^|[;&|(]|\bthen\b|\bdo\b|\bexec\b|\bsudo\b)\s*((?:\./|/)[\w./-]+|[\w.-]+\.sh)\b",
                      re.MULTILINE)
_SOLUTION_PATH = re.compile(r"(?<![\w.])/solution/([\w./-]+)")
MAX_LISTED = 20_000  # entries of one folder tree listed for the checks
MAX_MATCHES = 200_000  # path-against-pattern matches for one task's COPY sources
MAX_COMMANDS = 200  # distinct commands of one script looked for in the task's files
MAX_PATTERN_PARTS = 64  # segments of one COPY source (a longer one is not checked)


def _listing(root: Path) -> list[tuple[str, ...]]:
    """Every path under `root` as its parts, in one walk that follows no link, at most
    MAX_LISTED of them (a bigger tree is listed in part)."""
    found: list[tuple[str, ...]] = []
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath).relative_to(root).parts
        for name in sorted(dirnames + filenames):
            found.append((*base, name))
            if len(found) >= MAX_LISTED:
                return found
    return found


def _glob_matches(pattern: list[str], parts: tuple[str, ...]) -> bool:
    """Whether a path matches a glob as pathlib's does (`**`: any number of folders, other
    segments fnmatch), in time linear in the two lengths' product, never exponential."""
    def closure(states: set[int]) -> set[int]:
        todo, out = list(states), set(states)
        while todo:
            i = todo.pop()
            if i < len(pattern) and pattern[i] == "**" and i + 1 not in out:
                out.add(i + 1)
                todo.append(i + 1)
        return out

    states = closure({0})
    for part in parts:
        step = set()
        for i in states:
            if i < len(pattern):
                if pattern[i] == "**":
                    step.add(i)
                elif fnmatchcase(part, pattern[i]):
                    step.add(i + 1)
        if not step:
            return False
        states = closure(step)
    return len(pattern) in states


def task_defects(task: Task) -> list[str]:
    """What the task folder itself gets wrong, each said with the file that shows it."""
    found = [*_not_executable(task), *_step_reaches_out(task), *_copies_what_it_lacks(task)]
    if task.step is None:  # the whole task: each of its steps as Harbor runs it
        for step in task.config.steps or []:
            view = task.step_view(step)
            found += [d for d in (*_not_executable(view), *_step_reaches_out(view)) if d not in found]
    return found


def _copies_what_it_lacks(task: Task) -> list[str]:
    """COPY/ADD sources the build context does not have (a data file never committed:
    Docker's 'file not found in build context'). Stages (--from), URLs and globs that match
    something are fine."""
    context = task.paths.environment
    text = _read(task, task.paths.dockerfile)
    if text is None:
        return []
    defects = []
    listed: list[tuple[str, ...]] | None = None
    budget = MAX_MATCHES
    for line in joined_lines(text):
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD") or line.lstrip().startswith(("COPY [", "ADD [")):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]) or len(args) < 2:
            continue
        for source in args[:-1]:
            if "://" in source or "$" in source:
                continue
            pattern = [p for p in source.split("/") if p not in ("", ".")]
            pattern = [p for i, p in enumerate(pattern) if not (p == "**" and pattern[i - 1:i] == ["**"])]
            if not pattern or len(pattern) > MAX_PATTERN_PARTS:
                continue
            if not any(c in source for c in "*?["):
                hits = [context.joinpath(*pattern)]
            else:
                listed = _listing(context) if listed is None else listed
                if budget < len(listed):
                    break  # the task's match budget is spent: nothing more is claimed
                budget -= len(listed)
                hits = [context.joinpath(*parts) for parts in listed if _glob_matches(pattern, parts)]
            if not any(_inside(task.path, p) or p.is_dir() for p in hits):
                defects.append(f"environment/Dockerfile copies {source}, which the task does not ship "
                               "(not in environment/: the build fails 'file not found in build context')")
    return defects


def _inside(root: Path, path: Path) -> Path | None:
    """`path` when it is a regular file inside `root` (no link leaving it), else None."""
    try:
        resolved = path.resolve()
        resolved.relative_to(root.resolve())
    except (OSError, ValueError):
        return None
    return resolved if resolved.is_file() else None


def _shipped(task: Task, name: str, listings: dict[Path, dict[str, list[tuple[str, ...]]]]) -> list[Path]:
    """Files of the task folder a command name may mean: the same relative path under the
    folders a script runs from, or, for an absolute path, the same file name anywhere in
    the folders the image or the solution is made of."""
    roots = [task.solution_dir, task.paths.environment]
    base = Path(name).name
    found = []
    for root in roots:
        if not root.is_dir():
            continue
        if not name.startswith("/"):
            hit = _inside(task.path, root / name)
            found += [hit] if hit else []
        else:
            if root not in listings:  # by file name, each folder walked once
                listings[root] = {}
                for parts in _listing(root):
                    listings[root].setdefault(parts[-1], []).append(parts)
            found += [root.joinpath(*parts) for parts in listings[root].get(base, [])
                      if _inside(task.path, root.joinpath(*parts))]
    return found


def _not_executable(task: Task) -> list[str]:
    sources = [task.solve_sh, task.paths.dockerfile]
    defects: list[str] = []
    listings: dict[Path, dict[str, list[tuple[str, ...]]]] = {}
    for source in sources:
        text = _read(task, source)
        if text is None:
            continue
        if source.name == "Dockerfile":  # only what RUN lines run (COPY --chmod=... counts as chmod)
            text = "\n".join(line[4:] if line[:4].upper() == "RUN " else line.replace("--chmod", "chmod")
                             for line in joined_lines(text) if line[:4].upper() in ("RUN ", "COPY", "ADD "))
        for name in list(dict.fromkeys(m.group(1) for m in _COMMAND.finditer(text)))[:MAX_COMMANDS]:
            if re.search(r"chmod\b[^\n]*" + re.escape(Path(name).name), text):
                continue  # made executable on the way (chmod +x, COPY --chmod)
            for file in _shipped(task, name, listings):
                if not file.stat().st_mode & 0o111:
                    rel = file.relative_to(task.path.resolve())
                    defects.append(f"{source.relative_to(task.path)} runs {name}, but the task ships "
                                   f"{rel} without its run bit (chmod +x): 'Permission denied' "
                                   "wherever the folder is copied as it is")
    return sorted(set(defects))


def _step_reaches_out(task: Task) -> list[str]:
    if task.step_dir is None:
        return []
    solve = task.solve_sh
    text = _read(task, solve)
    if text is None:
        return []
    defects = []
    for match in _SOLUTION_PATH.finditer(text):
        rel = match.group(1).rstrip("/.")
        if rel and _inside(task.solution_dir, task.solution_dir / rel) is None \
                and not (task.solution_dir / rel).is_dir():
            defects.append(f"steps/{task.step}/solution/solve.sh uses /solution/{rel}, which step "
                           f"{task.step!r} does not ship (each step gets only its own solution/)")
    for word in _words(text):
        if word.startswith("../") or "/../" in word:
            defects.append(f"steps/{task.step}/solution/solve.sh reaches outside its own folder "
                           f"({word}): a step gets only its own solution/")
    return sorted(set(defects))


def _words(text: str) -> list[str]:
    """The script's words as the shell splits them (none where it cannot be split)."""
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return []


def _read(task: Task, path: Path) -> str | None:
    inside = _inside(task.path, path)
    if inside is None:
        return None
    try:
        with open(inside, "rb") as handle:  # only what is looked at: a huge file costs 200 kB
            return handle.read(200_000).decode(errors="replace")
    except OSError:
        return None
