"""A job's result.json records which optional runtime parts the engine had
(Capabilities.parts, as JobResult.capabilities.parts, sorted), so a reader of the result
knows what the run could use; a result written before they were recorded loads with None."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_trial_on_fake import graded, run_job_on

from orchestrator.models.result import JobCapabilities, JobResult
from orchestrator.runtime import Part
from orchestrator.runtime.fake import FakeRuntime

DATA = Path(__file__).parent / "data" / "results"
TEST_SH = "/tests/test.sh"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRuntime]:
    monkeypatch.setenv("ORCHESTRA_NETWORK_POOL", "0")  # nothing parked: the fake ends empty
    rt = FakeRuntime()
    rt.add_image("python:3.12-slim-bookworm", workdir="/app")  # make_task's FROM
    rt.on_exec(TEST_SH, graded())
    yield rt


def test_a_jobs_result_json_names_the_parts_its_runtime_had(fake: FakeRuntime, tmp_path: Path) -> None:
    job, _ = run_job_on(fake, tmp_path)
    want = ["health", "layer-sizes", "listing", "network-switch", "volumes"]  # the fake's, sorted
    assert sorted(str(p) for p in fake.capabilities().parts) == want
    assert job.capabilities is not None and job.capabilities.parts == want
    written = json.loads((tmp_path / "jobs" / "fake-job" / "result.json").read_text())
    assert written["capabilities"]["parts"] == want
    assert Part.REGISTRY.value not in written["capabilities"]["parts"]  # the fake has no registry


def test_the_parts_are_recorded_in_one_order_and_an_old_result_loads_without_them() -> None:
    one = JobCapabilities(disk_quota="watchdog", host_isolation="none", parts=frozenset({Part.LISTING, Part.COMMIT}))
    other = JobCapabilities(disk_quota="watchdog", host_isolation="none", parts=[Part.COMMIT, Part.LISTING])
    assert one.parts == other.parts == ["commit", "listing"]
    old = json.loads((DATA / "job.json").read_text())
    assert "parts" not in json.dumps(old.get("capabilities") or {})  # written before they were recorded
    job = JobResult.model_validate(old)
    assert job.capabilities is not None and job.capabilities.parts is None and job.capabilities.disk_quota == "loop-volume"
