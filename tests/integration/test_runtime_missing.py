"""An OCI runtime the engine lacks, on the real engine: asked for by a container, it is the
trial's launch_error naming the runtime, and it is not retried (every attempt would fail
the same way). The job's pre-flight refuses such a --runtime before any trial; a trial
meets it when the pre-flight's engine is not the one that runs it (a Ray node's, or the
engine's runtimes changed since), which the test stands in for by a pre-flight that is
told the runtime exists."""

import uuid
from dataclasses import replace

import pytest
from conftest import make_task, run

from orchestrator.errors import RuntimeMissing
from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import FailureMode, TrialResult
from orchestrator.runtime.base import ContainerSpec
from orchestrator.tasks.load import load_tasks

MISSING = "orchestra-no-such-runtime"


def test_the_engine_names_the_runtime_it_lacks(runtime):
    assert MISSING not in runtime.engine_facts().oci_runtimes
    spec = ContainerSpec(image="orchestra/base:bookworm", name=f"orchestra-test-{uuid.uuid4().hex[:8]}",
                         labels={"orchestra.kind": "test", "orchestra.job": "test-runtime-missing"},
                         command=["true"], cpus=0.5, memory_mb=128, pids_limit=32, network="none",
                         runtime=MISSING)
    with pytest.raises(RuntimeMissing, match=f"the engine has no OCI runtime '{MISSING}' \\(it has: .*runc"):
        runtime.create(spec)


def test_a_trial_under_a_missing_runtime_is_a_launch_error_not_retried(runtime, tmp_path, monkeypatch):
    make_task(tmp_path / "ds", "t", toml="[environment]\ncpus = 0.5\nmemory_mb = 512\n", solve="touch /app/ok\n")
    told = runtime.capabilities
    monkeypatch.setattr(runtime, "capabilities", lambda facts=None: replace(
        told(facts), oci_runtimes=[*told(facts).oci_runtimes, MISSING]))
    options = JobOptions(job_name="missing-runtime", jobs_dir=tmp_path / "jobs", n_concurrent=1, k=1,
                         oci_runtime=MISSING, max_retries=2)
    job = run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"), options)
    [path] = (tmp_path / "jobs" / "missing-runtime" / "trials").glob("*/result.json")
    trial = TrialResult.model_validate_json(path.read_text())
    assert trial.failure_mode == FailureMode.LAUNCH_ERROR, trial.error
    assert f"the engine has no OCI runtime '{MISSING}'" in (trial.error or "")
    assert trial.retries == [] and job.retried == 0
    assert trial.not_retried and "RuntimeMissing" in trial.not_retried
    assert job.counts == {"launch_error": 1}


def test_the_engine_default_runtime_still_runs(runtime, tmp_path):
    make_task(tmp_path / "ds", "ok", toml="[environment]\ncpus = 0.5\nmemory_mb = 512\n", solve="touch /app/ok\n")
    _, [trial] = run(runtime, tmp_path / "ds", tmp_path / "jobs", n=1)
    assert trial.failure_mode == FailureMode.NONE and trial.not_retried is None
