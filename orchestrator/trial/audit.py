"""Trajectory audit (SPEC-TASKS B.1, DESIGN 2 step 9): recall stats, markers used at point
of use, and the answer-file scan.

- Recall stats: memory_recall records, their hits, injected chars, suppressed count; the
  memory shadow: records that carry a V2 shadow retriever's top-1 beside the primary's,
  and how many of those agree (counted where at least one of the two found something).
- A marker is *used at point of use* only if it appears in a tool's arguments or in answer
  text after a recall that returned hits (from the start when markers_in_prefix).
- Leak: a read of grading material the agent must not have. Concretely: a successful tool
  result whose arguments name one of the task's seed *sources* (`memory/<scope>/<name>`
  in the task folder, or its host path) and whose output holds that file's content or one
  of its fact body lines of 20+ characters. Paths inside the agent's own state root
  (`ORCHESTRA_STATE_HOME`, where memory-on delivers its seeded copies) are removed from
  the arguments first: reading one's own seeded memory is what memory-on is for, never a
  leak. Also by content, wherever the agent found it (an image built with `COPY . /app`
  ships the tests): a successful tool result whose output holds two or more distinctive
  lines of one of the task's tests/ or solution/ files (lines of 24+ characters that are not
  in the instruction or an earlier tool call's arguments: what the
  agent typed itself is never its leak), or one such line of 60+, or the whole of a short
  file; in memory-off, the
  same for the seed sources (in memory-on reading them is what the arm is for). Any leak
  voids the trial as answer_leak.
- Incomplete: a malformed line or value, no trajectory at all, or a trajectory cut at the
  copy-out cap. The reason is recorded; an audit that could not see everything is never
  reported as clean.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.models import MemoryAudit, trajectory
from orchestrator.paths import TaskPaths
from orchestrator.util import JsonObject

if TYPE_CHECKING:
    from orchestrator.tasks import FactFile

MIN_LEAK_LINE = 20
MIN_GRADING_LINE = 24  # a line of a grading file this long is distinctive enough to count
MIN_WHOLE_FILE = 40  # a grading file with one such line counts whole, if at least this long
MIN_TELLING_LINE = 60  # one distinctive line this long is enough on its own
MAX_GRADING_BYTES = 1024 * 1024  # larger files (data, binaries) are not fingerprinted


@dataclass(frozen=True)
class GradingFile:
    """One file the agent must never see: its distinctive lines, or its whole text."""

    relative: str  # tests/test.sh, solution/solve.sh, memory/project/x.md
    lines: frozenset[str]
    whole: str | None


def _text_lines(path: Path) -> list[str]:
    try:
        if path.stat().st_size > MAX_GRADING_BYTES:
            return []
        text = path.read_bytes().decode()
    except (OSError, UnicodeDecodeError):
        return []
    return [ln.strip() for ln in text.splitlines()]


@functools.lru_cache(maxsize=256)
def grading_files(task_dir: Path, with_memory: bool) -> tuple[GradingFile, ...]:
    """The task's tests/, solution/ (and with `with_memory` its memory/) text files,
    fingerprinted. Lines the instruction also holds are left out (environment/ is not: a
    copy of the tests there is exactly the mistake to catch)."""
    paths = TaskPaths(task_dir)
    known: set[str] = set(_text_lines(paths.instruction))
    found = []
    for root in [paths.tests, paths.solution] + ([task_dir / "memory"] if with_memory else []):
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*"))[:500]:
            if not path.is_file() or path.name == "seeds.toml":
                continue
            lines = [ln for ln in _text_lines(path) if len(ln) >= MIN_GRADING_LINE and ln not in known]
            whole = "\n".join(ln for ln in _text_lines(path) if ln)
            if lines or len(whole) >= MIN_WHOLE_FILE:
                found.append(GradingFile(str(path.relative_to(task_dir)), frozenset(lines),
                                         whole if len(lines) < 2 and len(whole) >= MIN_WHOLE_FILE else None))
    return tuple(found)


@dataclass
class Audit:
    complete: bool = True
    incomplete_reason: str | None = None
    malformed_lines: list[int] = field(default_factory=list)
    recall_events: int = 0
    hits: int = 0
    injected_chars: int = 0
    suppressed: int = 0
    markers: int = 0  # point-of-use markers the task declares
    shadow_events: int = 0
    shadow_agree: int = 0
    markers_used: list[str] = field(default_factory=list)
    markers_before_recall: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)

    def record_into(self, memory: MemoryAudit) -> None:
        """Into the trial's result: this audit's findings replace an earlier step's, and its
        leaks join theirs (a leak in any step voids the trial)."""
        memory.complete, memory.incomplete_reason = self.complete, self.incomplete_reason
        memory.malformed_lines = list(self.malformed_lines)
        memory.recall_events, memory.hits = self.recall_events, self.hits
        memory.injected_chars, memory.suppressed = self.injected_chars, self.suppressed
        memory.markers, memory.shadow_events, memory.shadow_agree = self.markers, self.shadow_events, self.shadow_agree
        memory.markers_used, memory.markers_before_recall = list(self.markers_used), list(self.markers_before_recall)
        memory.leaks = memory.leaks + self.leaks

    def mark_incomplete(self, reason: str) -> None:
        self.complete = False
        self.incomplete_reason = self.incomplete_reason or reason


def _count(value: object, audit: Audit, line: int) -> int:
    """A non-negative count the agent wrote; anything else makes the audit incomplete."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        audit.malformed_lines.append(line)
        audit.mark_incomplete("a memory_recall record holds a value that is not a count")
        return 0
    return int(min(value, 10**12))


def _read_trajectory(path: Path) -> tuple[list[JsonObject], list[int]]:
    """The records that are events or memory recalls, and the numbers of the lines that are not."""
    found: list[JsonObject] = []
    malformed: list[int] = []
    for number, record in trajectory.records(path):
        if record is None or not ({"event", "memory_recall"} & set(record)):
            malformed.append(number)
        else:
            found.append(record)
    return found, malformed


def _event_texts(event: JsonObject) -> list[str]:
    """The places a marker counts as used: tool arguments and answer text."""
    texts = []
    tool = trajectory.tool_of(event)
    if tool is not None and event.get("kind") in ("tool_dispatch", "tool_result"):
        args = tool.get("args")
        texts.append(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
    if event.get("kind") in ("message", "text") and isinstance(event.get("text"), str):
        texts.append(event["text"])
    return texts


def _without_state_root(text: str, state_home: str | None) -> str:
    """Arguments with every path under the agent's own state root taken out."""
    if not state_home:
        return text
    return re.sub(re.escape(state_home.rstrip("/")) + r"/[^\s'\"`;|&<>)]*", " ", text)


def _content_leak(output: str, grading: Iterable[GradingFile], typed: list[str]) -> str | None:
    """A grading file's content in a tool's output, beyond what the agent typed itself."""
    if len(output) < MIN_GRADING_LINE:
        return None
    flat = "\n".join(ln.strip() for ln in output.splitlines() if ln.strip())

    def own(text: str) -> bool:
        return any(text in args for args in typed)

    for item in grading:
        seen = [ln for ln in item.lines if ln in flat]
        if seen:
            seen = [ln for ln in seen if not own(ln)]  # searched only when there is a match
        if len(seen) >= 2 or any(len(ln) >= MIN_TELLING_LINE for ln in seen):
            return f"a tool's output holds {len(seen)} line(s) of {item.relative}"
        if item.whole and item.whole in flat and not own(item.whole):
            return f"a tool's output holds {item.relative}"
    return None


def _leak(event: JsonObject, facts: Sequence[FactFile], state_home: str | None = None) -> str | None:
    tool = event.get("tool")
    if event.get("kind") != "tool_result" or not isinstance(tool, dict):
        return None
    if tool.get("err") or tool.get("exit_code") not in (0, None):
        return None
    args = tool.get("args")
    args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    args = _without_state_root(args, state_home)
    output = str(tool.get("output") or "")
    for fact in facts:
        if fact.relative not in args and str(fact.source) not in args:
            continue
        lines = [ln.strip() for ln in fact.body.splitlines() if len(ln.strip()) >= MIN_LEAK_LINE]
        if fact.text.strip() and fact.text.strip() in output or any(ln in output for ln in lines):
            return f"{tool.get('name', 'tool')} read {fact.relative}"
    return None


def audit_trajectory(path: Path, facts: Sequence[FactFile], markers: list[str],
                     markers_in_prefix: bool, state_home: str | None = None, truncated: bool = False,
                     grading: tuple[GradingFile, ...] = ()) -> Audit:
    """Never raises on what the agent wrote: anything unreadable makes it incomplete.
    `grading`: the task's files the agent must not see (grading_files), matched by content."""
    try:
        audit = _audit(path, facts, markers, markers_in_prefix, state_home, grading)
    except Exception as exc:  # untrusted input must never become an infrastructure error
        audit = Audit()
        audit.mark_incomplete(f"the trajectory could not be audited ({exc.__class__.__name__})")
    if not path.is_file():
        audit.mark_incomplete("no trajectory written (the audit saw nothing)")
    elif truncated:
        audit.mark_incomplete("the trajectory was cut at the copy-out cap; the rest was not seen")
    return audit


def _audit(path: Path, facts: Sequence[FactFile], markers: list[str], markers_in_prefix: bool,
           state_home: str | None, grading: tuple[GradingFile, ...] = ()) -> Audit:
    records, malformed = _read_trajectory(path)
    audit = Audit(malformed_lines=malformed[:50], markers=len(markers))
    if malformed:
        audit.mark_incomplete(f"{len(malformed)} malformed trajectory line(s)")
    armed = markers_in_prefix
    used: set[str] = set()
    early: set[str] = set()
    typed: list[str] = []  # every tool call's arguments so far: what the agent wrote itself
    for number, record in enumerate(records, start=1):
        try:
            _audit_record(record, number, audit, facts, markers, state_home, used, early, armed)
            _audit_content(record, audit, grading, typed)
        except (RecursionError, ValueError, TypeError, OverflowError):  # one bad line, not the audit
            audit.malformed_lines.append(number)
            audit.mark_incomplete("a trajectory line could not be audited")
            continue
        armed = armed or _armed(record)
    audit.markers_used = sorted(used)
    audit.markers_before_recall = sorted(early - used)
    return audit


def _audit_content(record: JsonObject, audit: Audit, grading: tuple[GradingFile, ...],
                   typed: list[str]) -> None:
    event = record.get("event")
    if not grading or not isinstance(event, dict):
        return
    tool = event.get("tool")
    if not isinstance(tool, dict):
        return
    args = tool.get("args")
    typed.append(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
    if event.get("kind") != "tool_result" or tool.get("err") or tool.get("exit_code") not in (0, None):
        return
    leak = _content_leak(str(tool.get("output") or ""), grading, typed)
    if leak and leak not in audit.leaks:
        audit.leaks.append(leak)


def _armed(record: JsonObject) -> bool:
    recall = record.get("memory_recall")
    return isinstance(recall, dict) and isinstance(recall.get("hits"), list) and bool(recall["hits"])


def _audit_record(record: JsonObject, number: int, audit: Audit, facts: Sequence[FactFile],
                  markers: list[str], state_home: str | None, used: set[str], early: set[str],
                  armed: bool) -> None:
    """One trajectory record into the audit (raises on values it cannot read)."""
    recall = record.get("memory_recall")
    if isinstance(recall, dict):
        hits = recall.get("hits")
        audit.recall_events += 1
        audit.hits += len(hits) if isinstance(hits, list) else 0
        audit.injected_chars += _count(recall.get("used_chars"), audit, number)
        audit.suppressed += _count(recall.get("suppressed"), audit, number)
        shadow = recall.get("shadow")
        if isinstance(shadow, dict) and (recall.get("top1") or shadow.get("top1")):
            audit.shadow_events += 1
            audit.shadow_agree += int(recall.get("top1") == shadow.get("top1"))
        return
    event = record.get("event")
    if not isinstance(event, dict):
        return
    for text in _event_texts(event):
        for marker in markers:
            if marker in text:
                (used if armed else early).add(marker)
    leak = _leak(event, facts, state_home)
    if leak:
        audit.leaks.append(leak)
