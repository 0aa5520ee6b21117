"""The admin and results commands through the Python API alone (orchestrator.api: admin,
results), against the real engine: `tasks check` (the engine answers, so each task's needs
are asked of it), a job run and then read back as `report` reads it (a gate against
another job, regressions.json written), `cleanup` of that job (nothing left to plan, nothing
removed) and `agents`. Each answer is typed; bad input is orchestra's InputError."""

from __future__ import annotations

import json

import pytest
from conftest import make_task, nothing_left

from orchestrator.api import (
    DONE,
    Removed,
    RunRequest,
    check_tasks,
    clean_up,
    cleanup_plan,
    compare_jobs,
    list_agents,
    open_report,
    run,
    serve_view,
)
from orchestrator.errors import InputError
from orchestrator.models import CompareReport
from orchestrator.tasks import load_task


def test_check_tasks_asks_the_engine_and_names_each_task(runtime, tmp_path):
    ds = tmp_path / "ds"
    make_task(ds, "alpha")
    make_task(ds, "big", toml="[environment]\ncpus = 1024\n")
    checked = check_tasks(ds)
    assert checked.engine_answered and checked.oci_runtimes  # runc at least
    by_name = {t.task: t for t in checked.tasks}
    assert sorted(by_name) == ["ds/alpha", "ds/big"]
    assert by_name["ds/alpha"].content_hash == load_task(ds / "alpha").content_hash
    assert any("cpus" in need for need in by_name["ds/big"].needs), by_name["ds/big"].needs
    with pytest.raises(InputError):
        check_tasks(tmp_path / "nowhere")


def test_a_job_read_back_gated_cleaned_and_listed_through_the_api(runtime, tmp_path):
    make_task(tmp_path / "ds", "alpha", solve="touch /app/ok\n")
    jobs = tmp_path / "jobs"
    for name, agent in (("base", "oracle"), ("next", "nop")):
        assert run(RunRequest(path=tmp_path / "ds", agent=agent, jobs_dir=jobs, job_name=name)).exit_code == DONE
    report = open_report(jobs / "next", baseline=jobs / "base", fail_on_regression=True)
    assert report.job.n_trials == 1 and report.job.mean_reward == 0.0 and [t.task for t in report.trials] == ["ds/alpha"]
    assert report.gate is not None and report.gate.failed and report.compare is None
    assert json.loads((jobs / "next" / "regressions.json").read_text())["failed"] is True
    with pytest.raises(InputError, match="needs --baseline"):
        open_report(jobs / "next", fail_on_regression=True)
    compared = compare_jobs(jobs / "base", jobs / "next")  # two conditions (oracle, nop): a pair
    assert isinstance(compared, CompareReport)
    with pytest.raises(InputError, match="nothing differs"):
        compare_jobs(jobs / "base", jobs / "base")

    plan = cleanup_plan(job="next")
    assert plan.scope == "job next" and plan.objects == []
    cleaned = clean_up(job="next")
    assert cleaned.removed == Removed() and cleaned.scope == "job next"
    with pytest.raises(InputError, match="choose one"):
        cleanup_plan(job="next", everything=True)
    assert nothing_left(runtime) == {}

    server = serve_view([jobs], 0)
    try:
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.stop()
    assert {"oracle", "nop"} <= {row.name for row in list_agents()}
