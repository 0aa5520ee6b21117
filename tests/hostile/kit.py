"""What the hostile suites (and bench) share: a model endpoint in its own process, as a real
one is (a replay server in-process would count its decoding against the orchestrator), a chat
upstream on loopback that keeps what it is sent, the orchestrator's RSS, a job's trial results by task, and the OCI runtime the matrices run
under (`make test-gvisor` sets ORCHESTRA_TEST_RUNTIME=runsc: the same cases under gVisor)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.result import TrialResult

OCI_RUNTIME = os.environ.get("ORCHESTRA_TEST_RUNTIME") or None  # None: the engine's default

UPSTREAM = """
import sys, time
from orchestrator.services.replay import ReplayServer
server = ReplayServer({"rules": [{"when": {}, "reply": {"content": "ok"}}]}).start()
print(server.url, flush=True)
time.sleep(3600)
"""


@contextlib.contextmanager
def model_endpoint() -> Iterator[dict]:
    """The endpoints (named `upstream`, model `m`) of a replay server in a child process."""
    server = subprocess.Popen([sys.executable, "-c", UPSTREAM], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "endpoints.json"
            path.write_text(json.dumps({"upstream": {"model": "m", "base_url": url}}))
            endpoints = load_endpoints([path])
        yield endpoints
    finally:
        server.kill()
        server.wait()


class ChatUpstream:
    """A Chat Completions upstream on loopback: every call answered `content`, billed
    `prompt_tokens` and `completion_tokens`; the bodies it was sent kept in order (a call the
    proxy refused never arrives). Use it as a context manager (shut down on exit)."""

    def __init__(self, content: str = "ok", prompt_tokens: int = 5, completion_tokens: int = 2) -> None:
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Chat(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                bodies.append(body)
                answer = json.dumps({
                    "id": "c1", "object": "chat.completion", "model": body.get("model", "m"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Chat)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def calls(self) -> int:
        return len(self.bodies)

    def endpoints(self, path: Path, name: str = "upstream") -> Path:
        """Write an endpoints file at `path` defining `name` (model `m`, the chat API) here."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({name: {"model": "m", "apis": ["chat"],
                                           "base_url": f"http://127.0.0.1:{self.server.server_address[1]}/v1"}}))
        return path

    def __enter__(self) -> ChatUpstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def rss_mb() -> float:
    """This process's resident memory, MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def trials_by_task(job_dir: Path) -> dict[str, tuple[TrialResult, Path]]:
    """A job's trials: task short name -> (result, trial folder)."""
    trials = {}
    for folder in (job_dir / "trials").iterdir():
        result = TrialResult.model_validate_json((folder / "result.json").read_text())
        trials[result.task.split("/")[-1]] = (result, folder)
    return trials
