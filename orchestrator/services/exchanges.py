"""Model exchanges: what the proxy saw, written down, and what can be made of it.

- `ExchangeLog`: the proxy appends one line per call to the trial's `model/exchanges.jsonl`
  (request, status, response, timing, attempts; keys scrubbed): `{"seq", "started",
  "seconds", "attempts", "stream", "status", "api", "asked_model", "mode", "request",
  "response", "api_request", "api_response"}`. `request` and `response` are always in
  Chat Completions' shape (what went upstream when the proxy translated; the agent's API
  translated to chat when it relayed), so readers and replay need one shape; `api` names
  the agent's API (chat, responses, messages, gemini) and `api_request` / `api_response`
  hold its own request (and, relayed, its own answer) when that is not chat. `mode`:
  relay or translate. Lines written before these fields existed have none of them (chat).
- `_event_stream`: a finished chat completion as the server-sent events a streaming client
  expects.
- `recorded_answers`: a job's exchanges, keyed so a replay endpoint serves them back
  (`orchestra run --replay-from JOB`).
- `trajectory_from_exchanges`: a DESIGN 3.6 trajectory for an agent that writes none.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.paths import JobDir, TrialDir
from orchestrator.util import JsonObject

RECORD = Path("model") / "exchanges.jsonl"
MAX_LINE = 4 * 1024 * 1024  # a recorded line beyond this keeps its size, not its text
MAX_TOTAL = 64 * 1024 * 1024  # one trial's exchanges.jsonl; later calls are counted, not written


class ExchangeLog:
    """Appends exchanges to a file; thread-safe; `scrub` removes keys before writing."""

    def __init__(self, path: Path, scrub: Callable[[bytes], bytes], max_total: int | None = None):
        self.path, self.scrub = path, scrub
        self.max_total = MAX_TOTAL if max_total is None else max_total
        self.count = self.written_bytes = self.dropped = self.dropped_bytes = 0
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, request: bytes, status: int, response: bytes, started: float,
              attempts: int, stream: bool, meta: JsonObject | None = None,
              api_request: bytes | None = None, api_response: bytes | None = None) -> None:
        """`request` and `response` chat-shaped; `meta` (the agent's `api`, its
        `asked_model`, `mode`) and the agent's own `api_request` / `api_response` beside."""
        with self._lock:
            self.count += 1
            head = {"seq": self.count, "started": round(started, 3),
                    "seconds": round(time.time() - started, 3), "attempts": attempts,
                    "stream": stream, "status": status, **(meta or {})}
            line = json.dumps(head)[:-1].encode() + b', "request": ' + _json_or_text(request) \
                + b', "response": ' + _json_or_text(response)
            extra = b"".join(f', "{name}": '.encode() + _json_or_text(value) for name, value in (
                ("api_request", api_request), ("api_response", api_response)) if value is not None)
            if len(line) + len(extra) < MAX_LINE:  # else the chat-shaped pair (replay's) is kept alone
                line += extra
            line += b"}"
            if len(line) > MAX_LINE:
                line = json.dumps({**head, "request": None, "response": None,
                                   "omitted_bytes": len(line)}).encode()
            line = self.scrub(line) + b"\n"
            if self.written_bytes + len(line) > self.max_total:
                self.dropped += 1  # the cap: counted (and said in the result), never written
                self.dropped_bytes += len(line)
                return
            with self.path.open("ab") as out:
                out.write(line)
            self.written_bytes += len(line)

    @property
    def written(self) -> int:
        return self.count - self.dropped

    def summary(self) -> ExchangeCounts:
        """What the record kept and what its cap dropped (ModelUsage's exchanges_* fields)."""
        return ExchangeCounts(exchanges_written=self.written, exchanges_dropped=self.dropped,
                              exchanges_dropped_bytes=self.dropped_bytes)


class ExchangeCounts(BaseModel):
    """An exchanges record's counts, named as the trial result's ModelUsage names them."""

    model_config = ConfigDict(frozen=True)

    exchanges_written: int  # lines written to exchanges.jsonl
    exchanges_dropped: int  # calls past the file's cap: counted, never written
    exchanges_dropped_bytes: int  # the size of those lines


def _json_or_text(data: bytes) -> bytes:
    try:
        json.loads(data)
        return data.strip() or b"null"
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return json.dumps(data.decode(errors="replace")).encode()


def read_exchanges(path: Path) -> list[JsonObject]:
    """The readable lines of an exchanges file (a malformed line is skipped)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


# ---- streaming ------------------------------------------------------------------------
def _event_stream(completion: bytes, include_usage: bool) -> bytes:
    """A finished chat completion as the SSE chunks a streaming client expects: one chunk
    with the whole message, one with the finish reason (and usage), then [DONE]."""
    from orchestrator.services.apis.chat import API

    request = {"stream_options": {"include_usage": include_usage}}
    return b"".join(API.stream_from_chat(json.loads(completion), "", request))


# ---- replay of a recorded job ------------------------------------------------------------
def conversation_key(request: JsonObject) -> str:
    """What identifies a call across re-runs: the task as the agent put it (the longest of
    the first user messages: agents such as aider open with canned example turns), the head
    of its system prompt (an agent's side calls, e.g. a title generator, differ there; the
    rest may hold dates) and the turn (assistant messages so far). Tool outputs are left out:
    they may hold timestamps."""
    messages = request.get("messages") or []
    users = [_text(m.get("content")) for m in messages[:12] if m.get("role") == "user"]
    task = max(users, key=len, default="")
    system = "".join(_text(m.get("content")) for m in messages if m.get("role") == "system")[:200]
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    return hashlib.sha256(json.dumps([task, system, turn]).encode()).hexdigest()


def recorded_answers(job: Path) -> dict[str, dict[str, list[tuple[int, JsonObject]]]]:
    """A job folder's recorded exchanges, per trial (`task#attempt`, from its result.json)
    and then per conversation key, in order. Only what the model proxy wrote on the host
    is read: each trial's own `model/exchanges.jsonl`, never a file the agent wrote (its
    artifacts or logs could hold a file of that name, to script a future replay); a trial
    without a readable result.json or whose record is a link is left out."""
    answers: dict[str, dict[str, list[tuple[int, JsonObject]]]] = {}
    for folder in JobDir(job).trial_folders():  # a link in trials/ is not followed
        path, result = folder / RECORD, TrialDir(folder).result
        if path.is_symlink() or (folder / "model").is_symlink() or not path.is_file():
            continue
        try:
            facts = json.loads(result.read_text())
            key = replay_key(str(facts["task"]), int(facts["attempt"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        trial = answers.setdefault(key, {})
        for item in read_exchanges(path):
            request, response = item.get("request"), item.get("response")
            if not isinstance(request, dict) or not isinstance(response, dict):
                continue
            trial.setdefault(conversation_key(request), []).append((int(item.get("status", 200)), response))
    return answers


def replay_key(task: str, attempt: int) -> str:
    """Which recorded trial answers a replayed one: the same task and attempt."""
    return f"{task}#{attempt}"


# ---- a trajectory for agents that write none -------------------------------------------
def trajectory_from_exchanges(exchanges: list[JsonObject]) -> list[JsonObject]:
    """DESIGN 3.6 events from the proxy's record (read_exchanges): each reply's text and
    tool calls, and the tool results the agent sent back in its next request."""
    events: list[JsonObject] = []
    seen_results: set[str] = set()
    for item in exchanges:
        request, response = item.get("request"), item.get("response")
        if isinstance(request, dict):
            for message in request.get("messages") or []:
                if isinstance(message, dict) and message.get("role") == "tool":
                    key = str(message.get("tool_call_id")) + str(message.get("content"))[:200]
                    if key not in seen_results:
                        seen_results.add(key)
                        events.append({"kind": "tool_result", "text": _text(message.get("content")),
                                       "tool": {"id": message.get("tool_call_id")}})
        if not isinstance(response, dict) or not response.get("choices"):
            continue
        message = (response["choices"][0] or {}).get("message") or {}
        if message.get("content"):
            events.append({"kind": "message", "text": _text(message["content"])})
        events += [dispatch_event(call) for call in message.get("tool_calls") or []]
    return [{"seq": i, "event": e} for i, e in enumerate(events)]


def dispatch_event(call: JsonObject) -> JsonObject:
    """A chat-completions tool call as a DESIGN 3.6 `tool_dispatch` event."""
    function = call.get("function") or {}
    try:
        args = json.loads(function.get("arguments") or "{}")
    except (ValueError, TypeError, RecursionError):
        args = function.get("arguments")
    return {"kind": "tool_dispatch",
            "tool": {"id": call.get("id"), "name": function.get("name"), "args": args}}


def _text(content: object) -> str:
    """A message's text: a string, or the text of its content parts."""
    if isinstance(content, list):
        return " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content or "")
