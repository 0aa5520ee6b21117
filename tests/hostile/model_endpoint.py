"""A model endpoint in its own process, as a real one is (a replay server in-process would
count its decoding against the orchestrator). Shared by the hostile suites and bench."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from orchestrator.models.endpoint import load_endpoints

UPSTREAM = """
import sys, time
from orchestrator.replay import ReplayServer
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
