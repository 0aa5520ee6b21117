"""A whole job, with a gate, through the Python API alone (orchestrator.api): no
subprocess, no typer. A baseline release does both tasks; the next release does neither and
the gate names both regressions, exit 1 in the outcome; the baseline's agent again holds the
gate, exit 0. A malformed task is orchestra's InputError naming the file, before anything
runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_task, nothing_left

from orchestrator.api import DONE, GATE_FAILED, RunRequest, run
from orchestrator.errors import InputError
from orchestrator.models.events import Observers, TrialFinished


def dataset(root: Path) -> Path:
    for name in ("alpha", "beta"):  # the oracle's solution does the task; nop does nothing
        make_task(root / "ds", name, solve="touch /app/ok\n")
    return root / "ds"


def test_a_job_and_its_gate_through_the_api(runtime, tmp_path):
    ds, jobs = dataset(tmp_path), tmp_path / "jobs"
    finished: list[TrialFinished] = []
    base = run(RunRequest(path=ds, agent="oracle", k=1, jobs_dir=jobs, job_name="base"),
               observers=Observers().on(TrialFinished, finished.append))
    assert base.exit_code == DONE and base.gate is None
    assert base.job_dir == jobs / "base" and (jobs / "base" / "result.json").is_file()
    assert {t.task: t.reward for t in base.trials} == {"ds/alpha": {"reward": 1.0}, "ds/beta": {"reward": 1.0}}
    assert base.job.n_trials == 2 and base.job.mean_reward == 1.0 and len(finished) == 2

    gated = run(RunRequest(path=ds, agent="nop", k=1, jobs_dir=jobs, job_name="gated",
                           baseline=jobs / "base", fail_on_regression=True))
    assert {t.task: t.reward for t in gated.trials} == {"ds/alpha": {"reward": 0.0}, "ds/beta": {"reward": 0.0}}
    assert gated.exit_code == GATE_FAILED and gated.gate is not None and gated.gate.failed
    assert {v.task: (v.verdict, v.gates) for v in gated.gate.verdicts} == {
        "ds/alpha": ("regressed", True), "ds/beta": ("regressed", True)}
    written = json.loads((jobs / "gated" / "regressions.json").read_text())  # as the CLI writes it
    assert written["failed"] is True and written["regressions"] == {"-": ["ds/alpha", "ds/beta"]}

    again = run(RunRequest(path=ds, agent="oracle", jobs_dir=jobs, job_name="again",
                           baseline=jobs / "base", fail_on_regression=True))
    assert again.exit_code == DONE and again.gate is not None and not again.gate.failed
    assert again.request.job_name == "again" and again.job.mean_reward == 1.0
    assert nothing_left(runtime) == {}


def test_a_malformed_task_is_an_input_error_naming_the_file_and_nothing_runs(tmp_path):
    task = make_task(tmp_path / "ds", "bad", toml="[agent]\ntimeout_sec = 'soon'\n")
    with pytest.raises(InputError) as refused:
        run(RunRequest(path=task, agent="oracle", jobs_dir=tmp_path / "jobs", job_name="never"))
    assert str(task / "task.toml") in str(refused.value) and "agent.timeout_sec" in str(refused.value)
    assert not (tmp_path / "jobs" / "never").exists()
