"""An ACP agent's `session/update` notifications as DESIGN 3.6 trajectory events.

- `agent_message_chunk`: consecutive chunks joined into one `message` event;
  `agent_thought_chunk` likewise into one `text` event (`"acp": "thought"`);
- `tool_call` and its `tool_call_update`s: merged per `toolCallId`; a `tool_dispatch`
  (name: its title, args: its rawInput) once it runs or ends, a `tool_result` (output: its
  text content, diffs and rawOutput; `err` when it failed) once it ends; a call still open
  at the session's end is dispatched without a result;
- `plan`: a `text` event listing the entries with their status (`"acp": "plan"`);
- the client's own notes (permission answers): `text` events (`"acp": "permission"`).

Other updates (user_message_chunk, available_commands_update, current_mode_update...) are
counted, not recorded. Updates are agent data: anything malformed is skipped, never an
error; events and text are capped (MAX_EVENTS, MAX_TEXT).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestrator.util import JsonObject

MAX_EVENTS = 20_000
MAX_TEXT = 64 * 1024  # characters of one event's text or output
CHUNKS = {"agent_message_chunk": ("message", None), "agent_thought_chunk": ("text", "thought")}


@dataclass
class _Tool:
    id: str
    name: str = ""
    kind: str = ""
    args: object = None
    status: str = "pending"
    content: list[Any] = field(default_factory=list)
    raw_output: object = None
    dispatched: bool = False
    done: bool = False


class Recorder:
    def __init__(self) -> None:
        self.events: list[JsonObject] = []
        self.dropped = 0
        self.ignored: dict[str, int] = {}
        self._chunk: tuple[str, list[str]] | None = None  # (update kind, texts)
        self._tools: dict[str, _Tool] = {}

    # ---- input ----------------------------------------------------------------------------
    def update(self, update: object) -> None:
        if not isinstance(update, dict) or not isinstance(update.get("sessionUpdate"), str):
            self.ignored["malformed"] = self.ignored.get("malformed", 0) + 1
            return
        kind = update["sessionUpdate"]
        if kind in CHUNKS:
            text = _block_text(update.get("content"))
            if self._chunk is not None and self._chunk[0] != kind:
                self._flush_chunk()
            if self._chunk is None:
                self._chunk = (kind, [])
            if text and sum(map(len, self._chunk[1])) < MAX_TEXT:
                self._chunk[1].append(text)
            return
        self._flush_chunk()
        if kind in ("tool_call", "tool_call_update"):
            self._tool(update)
        elif kind == "plan":
            entries = update.get("entries")
            entries = entries if isinstance(entries, list) else []
            lines = [f"- [{e.get('status', '')}] {e.get('content', '')}" for e in entries if isinstance(e, dict)]
            self._emit({"kind": "text", "text": "plan:\n" + "\n".join(lines), "acp": "plan"})
        else:
            self.ignored[kind[:64]] = self.ignored.get(kind[:64], 0) + 1

    def note(self, what: str, text: str) -> None:
        self._flush_chunk()
        self._emit({"kind": "text", "text": text, "acp": what})

    def flush(self) -> None:
        """At the session's end: the last chunks, and calls still open (dispatched only)."""
        self._flush_chunk()
        for tool in self._tools.values():
            if not tool.dispatched:
                self._dispatch(tool)

    def records(self) -> list[JsonObject]:
        return [{"seq": i, "event": e} for i, e in enumerate(self.events)]

    # ---- tools ----------------------------------------------------------------------------
    def _tool(self, update: JsonObject) -> None:
        tool_id = update.get("toolCallId")
        if not isinstance(tool_id, str | int):
            self.ignored["malformed"] = self.ignored.get("malformed", 0) + 1
            return
        tool = self._tools.get(str(tool_id))
        if tool is None:
            if len(self._tools) >= MAX_EVENTS:
                self.dropped += 1
                return
            tool = self._tools[str(tool_id)] = _Tool(id=str(tool_id))
        if tool.done:
            return
        if isinstance(update.get("title"), str) and not tool.dispatched:  # later titles describe
            tool.name = update["title"][:200]
        if isinstance(update.get("kind"), str):
            tool.kind = update["kind"][:64]
        if update.get("rawInput") is not None:
            tool.args = update["rawInput"]
        if isinstance(update.get("content"), list):
            tool.content = update["content"]
        if update.get("rawOutput") is not None:
            tool.raw_output = update["rawOutput"]
        if isinstance(update.get("status"), str):
            tool.status = update["status"]
        if tool.status in ("in_progress", "completed", "failed") and not tool.dispatched:
            self._dispatch(tool)
        if tool.status in ("completed", "failed"):
            tool.done = True
            output = _clip(_tool_output(tool.content, tool.raw_output))
            result = {"id": tool.id, "name": tool.name, "args": tool.args, "output": output}
            if tool.status == "failed":
                result["err"] = output or "failed"
            self._emit({"kind": "tool_result", "text": output, "tool": result})

    def _dispatch(self, tool: _Tool) -> None:
        tool.dispatched = True
        text = json.dumps(tool.args)
        if len(text) > MAX_TEXT:  # a huge write's input: kept as clipped text
            tool.args = _clip(text)
        self._emit({"kind": "tool_dispatch", "acp_kind": tool.kind,
                    "tool": {"id": tool.id, "name": tool.name or tool.kind, "args": tool.args}})

    # ---- output ---------------------------------------------------------------------------
    def _flush_chunk(self) -> None:
        if self._chunk is None:
            return
        kind, texts = self._chunk
        self._chunk = None
        event_kind, tag = CHUNKS[kind]
        if not any(texts):
            return
        event: JsonObject = {"kind": event_kind, "text": _clip("".join(texts))}
        if tag:
            event["acp"] = tag
        self._emit(event)

    def _emit(self, event: JsonObject) -> None:
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        self.events.append(event)


def _block_text(block: object) -> str:
    """A content block's text (text blocks; a resource's text; others named)."""
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        return block["text"]
    resource = block.get("resource")
    if isinstance(resource, dict) and isinstance(resource.get("text"), str):
        return resource["text"]
    return f"[{str(block.get('type'))[:32]}]" if block.get("type") else ""


def _tool_output(content: list[Any], raw_output: object) -> str:
    parts: list[str] = []
    for item in content:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "content":
            parts.append(_block_text(item.get("content")))
        elif item.get("type") == "diff":
            parts.append(f"diff {item.get('path')}:\n{item.get('newText') or ''}")
        elif item.get("type") == "terminal":
            parts.append(f"[terminal {item.get('terminalId')}]")
    if not any(parts) and raw_output is not None:
        try:
            parts.append(raw_output if isinstance(raw_output, str) else json.dumps(raw_output))
        except (TypeError, ValueError, RecursionError):
            pass
    return "\n".join(p for p in parts if p)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n[... {len(text) - MAX_TEXT} more characters]"
