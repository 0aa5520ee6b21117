"""A job folder is input, and `--resume` must not let it choose where model calls go (issue
45): a job folder made by someone else names its own endpoints file (base URL theirs, the
key variable yours). Resuming it in a folder whose endpoint config says otherwise is refused
(exit 2, naming the endpoint and the two ways on), and `--endpoints` always wins: the trial
run again calls the user's upstream, never theirs. Both upstreams are test-made servers on
loopback that count what they are sent."""

from __future__ import annotations

import http.server
import json
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_task

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"
MANIFEST = """schema_version: 1
condition: resume-endpoints
roster:
  - id: lead
    kind: orchestrator
    agent: oracle
    endpoint: live
"""
# the agent: one chat call through the trial's proxy, its answer kept as evidence
ASK = r"""touch /app/ok
python3 - <<'PY'
import json, os, urllib.request
body = {"model": "m", "messages": [{"role": "user", "content": "who answers?"}]}
request = urllib.request.Request(os.environ["ORCHESTRA_MODEL_URL"] + "/chat/completions",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": "Bearer " + os.environ["ORCHESTRA_MODEL_TOKEN"],
                                          "Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=30) as response:
    answer = json.load(response)["choices"][0]["message"]["content"]
open("/logs/artifacts/answer.txt", "w").write(answer)
PY
"""


class Upstream:
    """A chat upstream on loopback answering "from NAME", counting the calls it was sent."""

    def __init__(self, name: str) -> None:
        self.calls = 0
        upstream = self

        class Chat(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                upstream.calls += 1
                answer = json.dumps({"id": "c1", "object": "chat.completion", "model": "m",
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": f"from {name}"}}],
                                     "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                               "total_tokens": 7}}).encode()
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

    def endpoints(self, path: Path) -> Path:
        """An endpoints file defining `live` at this upstream."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"live": {"model": "m", "apis": ["chat"],
                                             "base_url": f"http://127.0.0.1:{self.server.server_address[1]}/v1"}}))
        return path


@pytest.fixture
def upstreams() -> Iterator[tuple[Upstream, Upstream]]:
    mine, theirs = Upstream("mine"), Upstream("theirs")
    try:
        yield mine, theirs
    finally:
        mine.server.shutdown()
        theirs.server.shutdown()


def orchestra(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ORCHESTRA, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_a_job_folder_cannot_choose_the_endpoint_of_a_resumed_trial(runtime, tmp_path, upstreams):
    mine, theirs = upstreams
    mine.endpoints(tmp_path / "endpoints/live.json")  # the user's own config (the default folder)
    their_file = theirs.endpoints(tmp_path / "elsewhere/live.json")
    (tmp_path / "m.yaml").write_text(MANIFEST)
    make_task(tmp_path / "ds", "asks", toml=SMALL, solve=ASK)
    # the folder's maker ran it against their endpoints file
    made = orchestra(tmp_path, "run", "--path", "ds", "--manifest", "m.yaml", "--endpoints", str(their_file),
                     "--jobs-dir", "jobs", "--job-name", "j", "-q")
    assert made.returncode == 0, made.stderr
    job = tmp_path / "jobs/j"
    # positive control: the job folder names their file, and their upstream answered its trial
    assert str(their_file) in (job / "config.json").read_text()
    assert theirs.calls == 1 and mine.calls == 0
    (job / "result.json").unlink()
    for result in (job / "trials").glob("*/result.json"):
        result.unlink()  # nothing complete: a resume runs the trial again

    refused = orchestra(tmp_path, "run", "--resume", "jobs/j", "-q")
    assert refused.returncode == 2, refused.stderr
    assert "live" in refused.stderr and "--endpoints" in refused.stderr and "--trust-job-endpoints" in refused.stderr
    assert theirs.calls == 1 and mine.calls == 0  # refused before any trial ran
    assert not list((job / "trials").glob("*/result.json"))

    resumed = orchestra(tmp_path, "run", "--resume", "jobs/j", "--endpoints", "endpoints/live.json", "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert mine.calls == 1 and theirs.calls == 1  # the user's upstream answered the trial run again
    (trial,) = [r.parent for r in (job / "trials").glob("*/result.json")]
    assert (trial / "artifacts/answer.txt").read_text() == "from mine"
    assert json.loads((trial / "result.json").read_text())["reward"] == {"reward": 1.0}
