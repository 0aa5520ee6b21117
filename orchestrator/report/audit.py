"""Trajectory audit (SPEC-TASKS B.1, DESIGN 2 step 9): recall stats, markers used at point
of use, and the answer-file scan.

- Recall stats: memory_recall records, their hits, injected chars, suppressed count.
- A marker is *used at point of use* only if it appears in a tool's arguments or in answer
  text after a recall that returned hits (from the start when markers_in_prefix).
- Leak: a successful tool result whose arguments name one of the task's memory/ source
  paths and whose output holds that file's content or one of its fact body lines of 20+
  characters. Any leak voids the trial as answer_leak.
- A malformed line makes the audit incomplete: it is reported, never taken as clean.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

MIN_LEAK_LINE = 20


@dataclass
class Audit:
    complete: bool = True
    malformed_lines: list[int] = field(default_factory=list)
    recall_events: int = 0
    hits: int = 0
    injected_chars: int = 0
    suppressed: int = 0
    markers_used: list[str] = field(default_factory=list)
    markers_before_recall: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def read_trajectory(path: Path) -> tuple[list[dict], list[int]]:
    records, malformed = [], []
    if not path.is_file():
        return records, malformed
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                malformed.append(number)
                continue
            if not isinstance(record, dict) or not ({"event", "memory_recall"} & set(record)):
                malformed.append(number)
                continue
            records.append(record)
    return records, malformed


def _event_texts(event: dict) -> list[str]:
    """The places a marker counts as used: tool arguments and answer text."""
    texts = []
    tool = event.get("tool") if isinstance(event.get("tool"), dict) else None
    if tool is not None and event.get("kind") in ("tool_dispatch", "tool_result"):
        args = tool.get("args")
        texts.append(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
    if event.get("kind") in ("message", "text") and isinstance(event.get("text"), str):
        texts.append(event["text"])
    return texts


def _leak(event: dict, facts) -> str | None:
    tool = event.get("tool")
    if event.get("kind") != "tool_result" or not isinstance(tool, dict):
        return None
    if tool.get("err") or tool.get("exit_code") not in (0, None):
        return None
    args = tool.get("args")
    args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    output = str(tool.get("output") or "")
    for fact in facts:
        if fact.relative not in args and str(fact.source) not in args:
            continue
        lines = [ln.strip() for ln in fact.body.splitlines() if len(ln.strip()) >= MIN_LEAK_LINE]
        if fact.text.strip() and fact.text.strip() in output or any(ln in output for ln in lines):
            return f"{tool.get('name', 'tool')} read {fact.relative}"
    return None


def audit_trajectory(path: Path, facts, markers: list[str], markers_in_prefix: bool) -> Audit:
    records, malformed = read_trajectory(path)
    audit = Audit(complete=not malformed, malformed_lines=malformed[:50])
    armed = markers_in_prefix
    used, early = set(), set()
    for record in records:
        recall = record.get("memory_recall")
        if isinstance(recall, dict):
            hits = recall.get("hits") if isinstance(recall.get("hits"), list) else []
            audit.recall_events += 1
            audit.hits += len(hits)
            audit.injected_chars += int(recall.get("used_chars") or 0)
            audit.suppressed += int(recall.get("suppressed") or 0)
            armed = armed or bool(hits)
            continue
        event = record.get("event")
        if not isinstance(event, dict):
            continue
        for text in _event_texts(event):
            for marker in markers:
                if marker in text:
                    (used if armed else early).add(marker)
        leak = _leak(event, facts)
        if leak:
            audit.leaks.append(leak)
    audit.markers_used = sorted(used)
    audit.markers_before_recall = sorted(early - used)
    return audit
