"""A job folder is input, and `--resume` must not let it choose where model calls go (issue
45): a job folder made by someone else names its own endpoints file (base URL theirs, the
key variable yours). Resuming it in a folder whose endpoint config says otherwise is refused
(exit 2, naming the endpoint and the two ways on), and `--endpoints` always wins: the trial
run again calls the user's upstream, never theirs. Both upstreams are test-made servers on
loopback that count what they are sent."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_task
from kit import ChatUpstream

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


@pytest.fixture
def upstreams() -> Iterator[tuple[ChatUpstream, ChatUpstream]]:
    """Mine and theirs: each answers "from NAME" and counts the calls it was sent."""
    with ChatUpstream("from mine") as mine, ChatUpstream("from theirs") as theirs:
        yield mine, theirs


def orchestra(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ORCHESTRA, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_a_job_folder_cannot_choose_the_endpoint_of_a_resumed_trial(runtime, tmp_path, upstreams):
    mine, theirs = upstreams
    mine.endpoints(tmp_path / "endpoints/live.json", "live")  # the user's own config (the default folder)
    their_file = theirs.endpoints(tmp_path / "elsewhere/live.json", "live")
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
