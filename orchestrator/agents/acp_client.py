"""orchestra's ACP client: JSON-RPC 2.0, one message a line, over a byte channel to an agent
(a process's stdin and stdout: `Runtime.attach` in a trial, a pipe in the unit tests).

One session, one prompt (the task's instruction), as the protocol's v1 says
(agentclientprotocol.com): `initialize` (protocol version 1; the `fs` capability offered
when a `Files` serves it, `terminal` always declined), `session/new` (the workdir, no MCP
servers), `session/prompt`; meanwhile the agent's `session/update` notifications are
recorded (acp_trajectory), its `session/request_permission` requests answered by policy
and its `fs/read_text_file` / `fs/write_text_file` requests served or declined. At the
deadline the client sends `session/cancel`, answers what the agent still asks with
`cancelled` and waits `grace` seconds for the turn's end.

Single-threaded: the caller's thread sends and reads, so the agent's requests are
answered in order. Everything the agent sends is untrusted: a line that is not JSON-RPC
is counted and skipped, bad parameters get the protocol's error, a line over MAX_LINE
bytes or a stream over MAX_STREAM ends the session (`protocol_error`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from orchestrator.agents.acp_trajectory import Recorder
from orchestrator.log import get_logger

log = get_logger()
PROTOCOL_VERSION = 1
MAX_LINE = 16 * 1024 * 1024  # one JSON-RPC message
MAX_STREAM = 256 * 1024 * 1024  # everything the agent may send in one session
SETUP_SEC = 120.0  # initialize and session/new, each (within the deadline)
Permission = Literal["allow", "allow_always", "reject"]
PREFERENCES: dict[str, tuple[str, ...]] = {
    "allow": ("allow_once", "allow_always"), "allow_always": ("allow_always", "allow_once"),
    "reject": ("reject_once", "reject_always")}
METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL = -32601, -32602, -32603
M = TypeVar("M", bound="BaseModel")


class Channel(Protocol):
    """A duplex byte stream to the agent (runtime.base.Attached has this shape)."""

    def send(self, data: bytes, timeout: float) -> None: ...
    def recv(self, timeout: float) -> bytes | None: ...
    def close_stdin(self) -> None: ...


class Files(Protocol):
    """The client's file system, as the agent sees it (absolute paths)."""

    def read(self, path: str) -> str: ...  # OSError with the reason
    def write(self, path: str, content: str) -> None: ...


class ProtocolError(Exception):
    """The agent broke the protocol past what the client tolerates."""


# ---- the agent's messages (lenient: extra fields are the agent's own business) ---------
class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class Message(_Loose):
    id: int | str | None = None
    method: str | None = None
    params: JsonValue = None
    result: JsonValue = None
    error: JsonValue = None


class InitializeResult(_Loose):
    protocolVersion: int
    agentInfo: dict[str, JsonValue] | None = None
    authMethods: list[JsonValue] = []


class NewSessionResult(_Loose):
    sessionId: str = Field(min_length=1, max_length=1024)


class PromptResult(_Loose):
    stopReason: str = Field(max_length=64)


class PermissionOption(_Loose):
    optionId: str
    kind: str = ""
    name: str = ""


class PermissionRequest(_Loose):
    toolCall: dict[str, JsonValue] = {}
    options: list[PermissionOption]


class ReadTextFile(_Loose):
    path: str = Field(max_length=4096)
    line: int | None = Field(default=None, ge=1)
    limit: int | None = Field(default=None, ge=0)


class WriteTextFile(_Loose):
    path: str = Field(max_length=4096)
    content: str


@dataclass
class Outcome:
    """How the session went: what `converse` turns into an exit code and acp.json."""

    stop_reason: str | None = None  # the prompt's stopReason, when the turn ended
    timed_out: bool = False  # the deadline came first
    stopped: bool = False  # the caller's stop event (the job was cancelled)
    ended: bool = False  # the agent's stream ended first
    error: str | None = None  # what broke (the protocol, an answer never came)
    agent: dict[str, JsonValue] | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("messages", "malformed", "updates", "permissions_allowed", "permissions_rejected",
         "permissions_cancelled", "fs_reads", "fs_writes", "fs_errors", "declined"), 0))


class AcpClient:
    def __init__(self, channel: Channel, permission: Permission = "allow",
                 files: Files | None = None, wire_log: list[bytes] | None = None,
                 wire_log_max: int = 8 * 1024 * 1024):
        self.channel, self.permission, self.files = channel, permission, files
        self.recorder = Recorder()
        self.outcome = Outcome()
        self.wire_log, self.wire_log_max, self._logged = wire_log, wire_log_max, 0
        self._buffer, self._received, self._next_id = b"", 0, 0
        self._responses: dict[int | str, Message] = {}
        self._cancelling, self._deadline = False, 0.0
        self.session_id: str | None = None

    # ---- the session ----------------------------------------------------------------------
    def run(self, instruction: str, cwd: str, deadline: float, grace: float,
            should_stop: threading.Event | None = None, meta: dict[str, JsonValue] | None = None) -> Outcome:
        """initialize, session/new, session/prompt until the turn ends or the deadline (then
        session/cancel and `grace` more seconds), or `should_stop`."""
        out, self._deadline = self.outcome, deadline
        try:
            init = self._call("initialize", {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {"fs": {"readTextFile": self.files is not None,
                                              "writeTextFile": self.files is not None},
                                       "terminal": False},
                "clientInfo": {"name": "orchestra", "title": "orchestra", "version": _version()}},
                min(deadline, time.time() + SETUP_SEC), should_stop)
            if init is None:
                return out
            started = _validated(InitializeResult, init.result, "initialize")
            out.agent = started.agentInfo
            if started.protocolVersion != PROTOCOL_VERSION:
                raise ProtocolError(f"the agent answered protocol version {started.protocolVersion}; "
                                    f"orchestra speaks {PROTOCOL_VERSION}")
            params: dict[str, JsonValue] = {"cwd": cwd, "mcpServers": []}
            if meta:
                params["_meta"] = meta
            new = self._call("session/new", params, min(deadline, time.time() + SETUP_SEC), should_stop)
            if new is None:
                return out
            self.session_id = _validated(NewSessionResult, new.result, "session/new").sessionId
            prompt_id = self._request("session/prompt", {
                "sessionId": self.session_id, "prompt": [{"type": "text", "text": instruction}]})
            answer = self._until(prompt_id, deadline, should_stop)
            if answer is None and not (out.ended or out.stopped):  # the deadline
                out.timed_out = self._cancelling = True  # whatever it answers to the cancel
                self._notify("session/cancel", {"sessionId": self.session_id})
                answer = self._until(prompt_id, time.time() + grace, should_stop)
            if answer is not None:
                out.stop_reason = _validated(PromptResult, answer.result, "session/prompt").stopReason
        except ProtocolError as exc:
            out.error = str(exc)
        finally:
            self.recorder.flush()
        return out

    def _call(self, method: str, params: dict[str, JsonValue], until: float,
              should_stop: threading.Event | None) -> Message | None:
        """A request and its answer; None when none came (outcome says why)."""
        answer = self._until(self._request(method, params), until, should_stop)
        out = self.outcome
        if answer is None and out.error is None:
            out.timed_out = not (out.ended or out.stopped) and time.time() >= self._deadline
            why = ("the agent's stream ended" if out.ended else "the job was cancelled" if out.stopped
                   else "the deadline came first" if out.timed_out else f"no answer in {SETUP_SEC:g} s")
            out.error = f"{method}: {why}"
        return answer

    def _until(self, want: int, until: float, should_stop: threading.Event | None) -> Message | None:
        """Read and handle the agent's messages until the answer to request `want`: its
        result, raising ProtocolError when it is an error; None at `until`, on
        `should_stop` (outcome.stopped) or at the stream's end (outcome.ended)."""
        while want not in self._responses:
            if should_stop is not None and should_stop.is_set():
                self.outcome.stopped = True
                return None
            left = until - time.time()
            if left <= 0:
                return None
            chunk = self.channel.recv(min(left, 0.25))
            if chunk == b"":
                self.outcome.ended = True
                return None
            if chunk:
                self._feed(chunk)
        answer = self._responses.pop(want)
        if answer.error is not None:
            raise ProtocolError(f"the agent answered an error: {json.dumps(answer.error)[:500]}")
        return answer

    # ---- reading --------------------------------------------------------------------------
    def _feed(self, chunk: bytes) -> None:
        self._received += len(chunk)
        if self._received > MAX_STREAM:
            raise ProtocolError(f"the agent sent over {MAX_STREAM} bytes")
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > MAX_LINE:
            raise ProtocolError(f"the agent sent a line over {MAX_LINE} bytes")
        for line in lines:
            if line.strip():
                self._handle(line)

    def _handle(self, line: bytes) -> None:
        self._log(b"<" + line)
        self.outcome.counts["messages"] += 1
        try:
            raw = json.loads(line)
            message = Message.model_validate(raw) if isinstance(raw, dict) else None
        except (ValueError, RecursionError, ValidationError):
            message = None
        if message is None:
            self.outcome.counts["malformed"] += 1
            return
        if message.method is None:
            if message.id is not None:  # an answer to one of ours
                self._responses[message.id] = message
            return
        if message.id is None:  # a notification
            if message.method == "session/update" and isinstance(message.params, dict):
                self.outcome.counts["updates"] += 1
                self.recorder.update(message.params.get("update"))
            return
        self._answer(message)

    def _answer(self, message: Message) -> None:
        """The agent's request, answered (never raises on what the agent sent)."""
        method, params = message.method or "", message.params
        try:
            if method == "session/request_permission":
                result: JsonValue = self._permission(PermissionRequest.model_validate(params))
            elif method == "fs/read_text_file" and self.files is not None:
                result = {"content": self._read(ReadTextFile.model_validate(params))}
            elif method == "fs/write_text_file" and self.files is not None:
                self._write(WriteTextFile.model_validate(params))
                result = None
            else:
                self.outcome.counts["declined"] += 1
                return self._reply(message.id, error={"code": METHOD_NOT_FOUND,
                                                      "message": f"{method[:100]}: not offered"})
        except ValidationError as exc:
            return self._reply(message.id, error={"code": INVALID_PARAMS, "message": str(exc)[:500]})
        except OSError as exc:
            self.outcome.counts["fs_errors"] += 1
            return self._reply(message.id, error={"code": INTERNAL, "message": str(exc)[:500]})
        self._reply(message.id, result=result)

    def _permission(self, request: PermissionRequest) -> JsonValue:
        # the call asked about, as a tool_call_update (some agents send it only here)
        self.recorder.update({**request.toolCall, "sessionUpdate": "tool_call_update"})
        title = str(request.toolCall.get("title") or request.toolCall.get("toolCallId") or "")[:200]
        by_kind = {o.kind: o.optionId for o in request.options}
        chosen = next((by_kind[k] for k in PREFERENCES[self.permission] if k in by_kind), None)
        if self._cancelling or chosen is None:
            self.outcome.counts["permissions_cancelled"] += 1
            self.recorder.note("permission", f"permission for {title}: cancelled")
            return {"outcome": {"outcome": "cancelled"}}
        kind = next(k for k, v in by_kind.items() if v == chosen)
        self.outcome.counts["permissions_rejected" if kind.startswith("reject") else "permissions_allowed"] += 1
        self.recorder.note("permission", f"permission for {title}: {kind}")
        return {"outcome": {"outcome": "selected", "optionId": chosen}}

    def _read(self, request: ReadTextFile) -> str:
        assert self.files is not None
        if not request.path.startswith("/"):
            raise OSError(f"{request.path}: not an absolute path")
        self.outcome.counts["fs_reads"] += 1
        text = self.files.read(request.path)
        if request.line is not None or request.limit is not None:
            lines = text.splitlines(keepends=True)[(request.line or 1) - 1:]
            text = "".join(lines[:request.limit] if request.limit is not None else lines)
        return text

    def _write(self, request: WriteTextFile) -> None:
        assert self.files is not None
        if not request.path.startswith("/"):
            raise OSError(f"{request.path}: not an absolute path")
        self.outcome.counts["fs_writes"] += 1
        self.files.write(request.path, request.content)

    # ---- writing --------------------------------------------------------------------------
    def _request(self, method: str, params: dict[str, JsonValue]) -> int:
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def _notify(self, method: str, params: dict[str, JsonValue]) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _reply(self, id_: int | str | None, result: JsonValue = None,
               error: dict[str, JsonValue] | None = None) -> None:
        body: dict[str, JsonValue] = {"jsonrpc": "2.0", "id": id_}
        body.update({"error": error} if error is not None else {"result": result})
        self._send(body)

    def _send(self, body: dict[str, JsonValue]) -> None:
        line = json.dumps(body, ensure_ascii=False).encode() + b"\n"
        self._log(b">" + line[:-1])
        try:
            self.channel.send(line, timeout=30)
        except OSError as exc:
            raise ProtocolError(f"the agent does not read its stdin: {exc}") from exc

    def _log(self, line: bytes) -> None:
        if self.wire_log is not None and self._logged + len(line) <= self.wire_log_max:
            self.wire_log.append(line)
            self._logged += len(line)


def _validated(model: type[M], value: JsonValue, what: str) -> M:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ProtocolError(f"{what}: the agent's answer is not ACP's: {str(exc)[:500]}") from exc


def _version() -> str:
    import orchestrator

    return orchestrator.__version__
