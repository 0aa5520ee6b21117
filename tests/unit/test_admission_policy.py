"""Admission by policy: declared cpus reserved for the whole trial (reserve, the default) or
the container's limit only (cpu-limit); memory reserved under both."""

from __future__ import annotations

import threading

import pytest
from conftest import make_task
from pydantic import ValidationError

from orchestrator.job.scheduler import Admission
from orchestrator.models.manifest import Manifest, default_manifest
from orchestrator.models.result import JobResult
from orchestrator.tasks.load import load_task


def _task(tmp_path, name, cpus=2, memory_mb=1024):
    return load_task(make_task(tmp_path, name, toml=f"[environment]\ncpus = {cpus}\nmemory_mb = {memory_mb}\n"))


def test_reserve_holds_declared_cpus_for_the_whole_trial(tmp_path):
    admission = Admission(2, 8192, threading.Event())
    a, b = _task(tmp_path, "a"), _task(tmp_path, "b")
    admission.acquire(a)
    assert admission.why_waiting(b) == "cpus 2 of 2 in use, needs 2"
    admission.release(a)
    assert admission.why_waiting(b) is None


def test_cpu_limit_lets_trials_share_the_cores_and_says_how_far_it_oversubscribed(tmp_path):
    admission = Admission(2, 8192, threading.Event(), policy="cpu-limit")
    tasks = [_task(tmp_path, name) for name in "abc"]
    for task in tasks:
        assert admission.why_waiting(task) is None
        admission.acquire(task)
    assert admission.peak_cpus == 6  # declared cpus running at once, on a 2-cpu budget
    for task in tasks:
        admission.release(task)
    assert admission.cpus == 0


def test_cpu_limit_still_reserves_memory(tmp_path):
    admission = Admission(2, 4096, threading.Event(), policy="cpu-limit")
    a, b = _task(tmp_path, "a", memory_mb=3000), _task(tmp_path, "b", memory_mb=3000)
    admission.acquire(a)
    assert admission.why_waiting(b) == "memory 3000 of 4096 MB in use, needs 3000"


@pytest.mark.parametrize("policy", ["reserve", "cpu-limit"])
def test_a_task_asking_more_cpus_than_the_budget_never_runs_under_either_policy(tmp_path, policy):
    admission = Admission(2, 8192, threading.Event(), policy=policy)
    assert not admission.fits_ever(_task(tmp_path, "big", cpus=4))
    assert admission.fits_ever(_task(tmp_path, "two", cpus=2))


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="not one of reserve, cpu-limit"):
        Admission(2, 8192, threading.Event(), policy="guarantee")


def test_the_manifest_says_the_policy_and_the_result_records_it():
    plain = default_manifest("oracle").model_dump(mode="json", exclude_unset=True)
    manifest = Manifest.model_validate({**plain, "sandbox": {"admission": "cpu-limit"}})
    assert manifest.sandbox.admission == "cpu-limit"
    assert Manifest.model_validate(plain).sandbox.admission is None
    with pytest.raises(ValidationError):
        Manifest.model_validate({**plain, "sandbox": {"admission": "limit"}})
    # unset, it leaves every existing manifest's condition hash as it was
    assert Manifest.model_validate(plain).condition_hash() == default_manifest("oracle").condition_hash()
    job = JobResult(job="j", condition="c", condition_hash="h", agent="oracle", policy="memory-on",
                    k=1, n_trials=0)
    assert job.admission == "reserve"
    with pytest.raises(ValidationError):
        JobResult.model_validate({**job.model_dump(), "admission": "guarantee"})
