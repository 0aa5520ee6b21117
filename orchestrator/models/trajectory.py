"""An agent's trajectory.jsonl, read the one way every reader needs (the memory audit, the
replay endpoint's rules, the viewer): one JSON object a line, ATIF-like records such as
{"seq": 3, "event": {"kind": "tool_dispatch", "tool": {"name": ..., "args": ...}}} or
{"memory_recall": {...}}. It is agent data, so nothing in it is trusted: a line that is not
a JSON object (bad JSON, 100,000-deep nesting, a huge integer, an array) is given as None
with its number, for the reader to count or show, never an error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from orchestrator.util import JsonObject


def records(path: Path) -> Iterator[tuple[int, JsonObject | None]]:
    """(line number from 1, the object on it or None) for each non-blank line; nothing
    when the file does not exist."""
    if not path.is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                yield number, None
                continue
            yield number, record if isinstance(record, dict) else None


def event_of(record: JsonObject) -> JsonObject:
    """A record's event ({} when it has none, or not an object)."""
    event = record.get("event")
    return event if isinstance(event, dict) else {}


def tool_of(event: JsonObject) -> JsonObject | None:
    """An event's tool call or result (None when it has none, or not an object)."""
    tool = event.get("tool")
    return tool if isinstance(tool, dict) else None
