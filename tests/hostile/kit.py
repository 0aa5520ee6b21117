"""What the hostile suites (and bench) share: a model endpoint in its own process, as a real
one is (a replay server in-process would count its decoding against the orchestrator), the
orchestrator's RSS, a job's trial results by task, and the OCI runtime the matrices run
under (`make test-gvisor` sets ORCHESTRA_TEST_RUNTIME=runsc: the same cases under gVisor)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
