"""A job killed with SIGKILL mid-run resumes with `orchestra run --resume` and ends with
every trial exactly once: the trials finished before the kill are not run again, the
killed process's containers and networks are reaped, its event log stays readable.

Alone on the engine (exclusive): any job's start reaps a dead orchestrator's leftovers, so
another test's job beside it would reap them before the resume could show it does."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
from conftest import make_task, orchestra_objects, wait_for
from test_jobs_at_scale import ORCHESTRA, results, start

pytestmark = pytest.mark.exclusive


def test_a_sigkilled_job_resumes_and_ends_with_every_trial_exactly_once(runtime, tmp_path):
    make_task(tmp_path / "ds", "nap", solve="sleep 2\ntouch /app/ok\n")
    job_dir = tmp_path / "jobs" / "killed"
    proc = start("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-k", "6", "-n", "2",
                 "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "killed", "-q")
    wait_for(lambda: len([r for r in results(job_dir) if r["failure_mode"] == "none"]) >= 2, 120)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    done_before = {r["trial_id"] for r in results(job_dir) if r["failure_mode"] == "none"}
    assert 2 <= len(done_before) < 6
    assert not (job_dir / "result.json").exists()
    resumed = subprocess.run([ORCHESTRA, "run", "--resume", str(job_dir), "-q"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    job = json.loads((job_dir / "result.json").read_text())
    ids = [t["trial_id"] for t in job["trials"]]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert sorted(t["attempt"] for t in job["trials"]) == list(range(6))
    assert job["counts"] == {"none": 6} and job["mean_reward"] == 1.0
    # The trials finished before the kill were not run again.
    for r in results(job_dir):
        if r["trial_id"] in done_before:
            assert r["finished_at"] < job["started_at"]
    assert orchestra_objects(runtime) == ([], [])  # the killed job's leftovers were reaped
    unreadable = []
    for line in (job_dir / "events.jsonl").read_text().splitlines():
        try:
            json.loads(line)
        except ValueError:
            unreadable.append(line)
    assert len(unreadable) <= 1, unreadable[:3]  # at most the killed process's half line, never the next one
