"""Hostile agents, round 2 (issue 26): agent-made data never becomes an infrastructure
error, and one trial's own disk filling up is that trial's disk_limit, never the job's.
One job, with retries on (a case that came out as infra would show as retried), beside a
bystander; each case a task whose solution/solve.sh or tests/test.sh is the behaviour."""

from __future__ import annotations

import json

import pytest
from conftest import make_task, nothing_left

from orchestrator.job import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.tasks import load_tasks

SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"
REWARD_OK = "mkdir -p /logs/verifier; if [ -e /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"

CASES = {
    # a number that does not fit a float (OverflowError), and one past Python's 4,300-digit
    # int-string limit (ValueError): both used to be retried twice as infra_error
    "reward-401-digits": dict(test="mkdir -p /logs/verifier; printf '{\"reward\": 1%0400d}' 0 > /logs/verifier/reward.json\n"),
    "reward-5001-digits": dict(test="mkdir -p /logs/verifier; printf '{\"reward\": 1%05000d}' 0 > /logs/verifier/reward.json\n"),
    # 1,000 nested folders in /logs/artifacts: RecursionError in the host-side walk
    "deep-artifacts": dict(solve="cd /logs/artifacts && echo fine > normal.txt\n"
                                 "for i in $(seq 1000); do mkdir d && cd d; done; echo deep > file\ntouch /app/ok\n"),
    # every inode of the trial's own 64 MB disk used up: the host's staging write gets ENOSPC
    "inodes": dict(toml="[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 64\n",
                   solve="touch /app/ok\ncd /logs/artifacts && python3 -c \"\nimport os\ni = 0\n"
                         "while True:\n    try:\n        open(f'i{i}', 'w').close()\n    except OSError:\n        break\n"
                         "    i += 1\nprint(i)\" > /logs/agent/inodes.txt\n"),
    "bystander": dict(solve="touch /app/ok\n"),
}


@pytest.fixture(scope="module", autouse=True)
def _nothing_left_after_this_module(runtime):
    yield
    assert nothing_left(runtime) == {}


@pytest.fixture(scope="module")
def round2(runtime, tmp_path_factory):
    root = tmp_path_factory.mktemp("round2")
    for name, case in CASES.items():
        make_task(root / "ds", name, toml=case.get("toml", SMALL), solve=case.get("solve", "touch /app/ok\n"),
                  test=case.get("test", REWARD_OK))
    job = run_job(runtime, load_tasks(root / "ds"), default_manifest("oracle"),
                  JobOptions(job_name="round2", jobs_dir=root / "jobs", n_concurrent=3, max_retries=2))
    trials = {}
    for folder in (root / "jobs/round2/trials").iterdir():
        r = TrialResult.model_validate_json((folder / "result.json").read_text())
        trials[r.task.split("/")[-1]] = (r, folder)
    yield job, trials


def test_the_job_finished_every_trial_once_and_the_bystander_is_unaffected(round2):
    job, t = round2
    assert sorted(t) == sorted(CASES) and job.n_trials == len(CASES)
    assert {name: r.retries for name, (r, _) in t.items() if r.retries} == {}
    assert t["bystander"][0].reward == {"reward": 1.0}


@pytest.mark.parametrize("name", ["reward-401-digits", "reward-5001-digits"])
def test_a_reward_no_float_holds_is_a_verifier_error_naming_why(round2, name):
    _, t = round2
    result = t[name][0]
    assert result.failure_mode == "verifier_error", (result.failure_mode, result.error)
    assert "reward.json" in result.error
    assert "too large" in result.error or "not JSON" in result.error, result.error


def test_a_thousand_level_artifact_tree_is_collected_as_far_as_it_goes(round2):
    _, t = round2
    result, folder = t["deep-artifacts"]
    assert result.failure_mode == "none" and result.reward == {"reward": 1.0}, result.error
    assert (folder / "artifacts/normal.txt").read_text() == "fine\n"
    collected = result.collected["/logs/artifacts"]
    assert collected["skipped"] >= 1 and collected["truncated"] is True, collected  # the deep part, counted


def test_an_agent_that_uses_up_its_own_disk_gets_disk_limit_and_the_job_goes_on(round2):
    _, t = round2
    result, folder = t["inodes"]
    made = int((folder / "agent/inodes.txt").read_text().strip() or 0)
    assert made > 1000  # it did exhaust them
    assert result.failure_mode in ("disk_limit", "none"), (result.failure_mode, result.error)
    if result.failure_mode == "disk_limit":
        assert "own disk is full" in result.error
    print("\nround2 figures: " + json.dumps({"inodes_made": made, "inodes_mode": result.failure_mode}))
