"""Commands run in a container, as a part of DockerRuntime (`ExecMixin`): `exec` runs one
and waits for it (attached: its end is seen as its stream closes) until a deadline or a
stop event, feeding it stdin and keeping up to `capture` bytes of its output; `spawn`
starts one in the background and `spawned_exit_code` reads how it ended. A command whose
container was killed under it ends with no exit code.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from orchestrator.runtime.base import Attached, ExecResult
from orchestrator.runtime.client import APIError, Hijacked, NotFound
from orchestrator.runtime.docker.shared import DockerState
from orchestrator.util import JsonObject

POLL_SEC = 0.25  # how often a waiting exec checks its deadline and stop event


class ExecMixin(DockerState):
    def exec(self, container: str, command: list[str], *, deadline: float | None = None,
             env: dict[str, str] | None = None, workdir: str | None = None,
             user: str | None = None, stdin: bytes | None = None, capture: int = 0,
             stop: threading.Event | None = None) -> ExecResult:
        """See Runtime.exec. The exec is attached: its end is seen the moment its stream
        closes (no polling), while short socket timeouts let the deadline and `stop` be
        checked, and a process that ended while a child it left behind holds the stream is
        seen as ended (looked at every 2 s: one inspect, not a poll). Output past `capture`
        bytes is read and dropped (agent commands redirect their own output to files, so
        their stream is empty)."""
        deadline = time.time() + 60 if deadline is None else deadline
        exec_id = self.api.exec_create(container, command, environment=env or {}, workdir=workdir,
                                       user=user or "", stdin=stdin is not None)["Id"]
        raw, buffer = self.api.exec_attach(exec_id)
        output = bytearray()
        waits = 0
        try:
            raw.settimeout(max(0.05, min(POLL_SEC, deadline - time.time())))
            if stdin:
                raw.sendall(stdin)
            raw.shutdown(socket.SHUT_WR)
            while True:
                try:
                    chunk = raw.recv(65536)
                except TimeoutError:
                    if time.time() >= deadline:
                        return ExecResult(None, True, bytes(output))
                    if stop is not None and stop.is_set():
                        return ExecResult(None, False, bytes(output))
                    waits += 1
                    if waits % 8 == 0 and not self._exec_state(exec_id).get("Running"):
                        break  # it ended, but something it started still holds the stream
                    raw.settimeout(max(0.05, min(POLL_SEC, deadline - time.time())))
                    continue
                if not chunk:
                    break
                buffer = _frames(buffer + chunk, output, capture)
            _frames(buffer, output, capture)  # what came with the engine's answer, if no more did
        finally:
            raw.close()
        for _ in range(100):  # the stream closes as the process ends; its state follows
            state = self._exec_state(exec_id)
            if not state.get("Running"):
                code = state.get("ExitCode")
                if (code is None or code >= 128) and self._going_down(container):
                    return ExecResult(None, False, bytes(output))  # the container was killed
                return ExecResult(code, False, bytes(output))
            time.sleep(0.02)
        return ExecResult(None, False, bytes(output))

    def _exec_state(self, exec_id: str) -> JsonObject:
        """The exec's state; {} once the engine has forgotten it (under gVisor an exec's
        instance goes when the watchdog kills its container: that is the container killed,
        not the engine failing)."""
        try:
            return self.api.exec_inspect(exec_id)
        except NotFound:
            return {}

    def _going_down(self, container: str, settle: float = 0.3) -> bool:
        """After an exec ended by a signal: whether its container is stopping. Under gVisor
        an agent may kill PID 1 (runc's kernel protects it); the exec then ends 0.1 s before
        the engine reports the container stopped, and test.sh must not be run in it."""
        until = time.monotonic() + settle
        while self.is_running(container):
            if time.monotonic() >= until:
                return False
            time.sleep(0.03)
        return True

    def attach(self, container: str, command: list[str], env: dict[str, str] | None = None,
               workdir: str | None = None, user: str | None = None) -> Attached:
        exec_id = self.api.exec_create(container, command, environment=env or {}, workdir=workdir,
                                       user=user or "", stdin=True)["Id"]
        raw, buffer = self.api.exec_attach(exec_id)
        return _AttachedExec(self, exec_id, raw, buffer)

    def spawn(self, container: str, command: list[str], env: dict[str, str] | None = None,
              workdir: str | None = None, user: str | None = None) -> str:
        exec_id = self.api.exec_create(container, command, environment=env or {}, workdir=workdir,
                                       user=user or "")["Id"]
        self.api.exec_start(exec_id)
        return exec_id

    def spawned_exit_code(self, exec_id: str) -> int | None:
        try:
            state = self.api.exec_inspect(exec_id)
        except APIError:
            return None
        return None if state["Running"] else state["ExitCode"]


def _frames(buffer: bytes, output: bytearray, capture: int) -> bytes:
    """Move the complete frames of docker's multiplexed stream (8-byte header: stream, 0, 0,
    0, big-endian size) into `output`, up to `capture` bytes; return the incomplete rest."""
    while len(buffer) >= 8:
        size = struct.unpack(">I", buffer[4:8])[0]
        if len(buffer) < 8 + size:
            break
        if len(output) < capture:
            output += buffer[8:8 + size][:capture - len(output)]
        buffer = buffer[8 + size:]
    return buffer


class _AttachedExec(Attached):
    """Runtime.attach's stream: the exec's hijacked socket, its multiplexed frames split
    into stdout (kept) and stderr (dropped)."""

    def __init__(self, runtime: ExecMixin, exec_id: str, raw: Hijacked, buffer: bytes):
        self.runtime, self.exec_id, self.raw = runtime, exec_id, raw
        self.buffer, self.ended = buffer, False

    def send(self, data: bytes, timeout: float) -> None:
        self.raw.settimeout(max(0.05, timeout))
        self.raw.sendall(data)

    def recv(self, timeout: float) -> bytes | None:
        out = self._stdout()
        if out or self.ended:
            return out
        self.raw.settimeout(max(0.01, timeout))
        try:
            chunk = self.raw.recv(65536)
        except TimeoutError:
            return None
        except OSError:
            chunk = b""
        if not chunk:
            self.ended = True
        self.buffer += chunk
        return self._stdout() or (b"" if self.ended else None)

    def _stdout(self) -> bytes:
        out = bytearray()
        while len(self.buffer) >= 8:
            size = struct.unpack(">I", self.buffer[4:8])[0]
            if len(self.buffer) < 8 + size:
                break
            if self.buffer[0] == 1:  # 1 stdout, 2 stderr
                out += self.buffer[8:8 + size]
            self.buffer = self.buffer[8 + size:]
        return bytes(out)

    def close_stdin(self) -> None:
        self.raw.shutdown(socket.SHUT_WR)

    def exit_code(self) -> int | None:
        state = self.runtime._exec_state(self.exec_id)
        return None if state.get("Running", True) else state.get("ExitCode")

    def close(self) -> None:
        self.raw.close()
