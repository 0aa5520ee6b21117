"""The runtime contract (tests/contract/runtime_contract.py) on DockerRuntime, against the
real engine: the same cases FakeRuntime passes (tests/unit/test_runtime_contract_fake.py).
Runs under the suite's shared engine hold (tests/engineshare.py, taken for every file in
tests/integration); every object a case makes carries its own job label and is removed."""

from __future__ import annotations

import pytest
from contract.runtime_contract import RuntimeContract, Script

from orchestrator.runtime.base import Part
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.tasks.standins import base_image

pytestmark = pytest.mark.docker


@pytest.fixture
def rt(runtime: DockerRuntime) -> DockerRuntime:
    return runtime


@pytest.fixture(scope="module")
def image(runtime: DockerRuntime) -> str:
    ref = base_image("bookworm")
    assert runtime.image_exists(ref), f"{ref} is missing: `orchestra images bootstrap` (make test does it)"
    return ref


@pytest.fixture
def script() -> Script:
    return lambda match, ran: None  # the engine runs the real command


class TestDockerRuntimeContract(RuntimeContract):
    pass


def test_docker_declares_every_optional_part(runtime: DockerRuntime) -> None:
    assert runtime.capabilities().parts == frozenset(Part)


def test_pre_flight_passes_a_job_needing_every_part_on_docker(runtime: DockerRuntime, tmp_path) -> None:
    """The job FakeRuntime refuses (tests/unit/test_preflight_parts.py) passes pre-flight
    here: Docker has every part, so what the job needs is all there."""
    from conftest import make_task

    from orchestrator.job.options import JobOptions
    from orchestrator.job.preflight import check_capabilities, parts_needed
    from orchestrator.models.manifest import Manifest, RosterMember
    from orchestrator.tasks.load import load_task

    snapshot = load_task(make_task(tmp_path, "snap", toml="[verifier]\nenvironment_mode = \"snapshot\"\n"))
    manifest = Manifest(condition="acp", roster=[
        RosterMember(id="lead", kind="orchestrator", agent="acp"),
        RosterMember(id="helper", kind="worker", agent="oracle")])
    options = JobOptions(job_name="parts", jobs_dir=tmp_path / "jobs")
    assert {Part.COMMIT, Part.SPAWN, Part.ATTACH} <= set(parts_needed([snapshot], options, manifest))
    caps = check_capabilities(runtime, options, tasks=[snapshot], manifest=manifest)
    assert caps.parts == frozenset(Part)
