"""Every container of a trial is made by one builder (trial/sandbox.py Sandbox.container): the
agent's sandbox, a separate verifier, compose sidecars and roster workers each get orchestra's
labels, the CA bundle (file and variables), the trial's OCI runtime and their quotas from it.
Whole trials run on FakeRuntime; the specs the fake received are read back. (The doctor's
scan container, job/doctor.py, is not a trial's and is not made here.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_task

from orchestrator.agents import agent_for
from orchestrator.host import owner_labels
from orchestrator.host.netpool import NetworkPool
from orchestrator.host.watchdog import DiskWatchdog
from orchestrator.models.manifest import Manifest, RosterMember
from orchestrator.models.result import FailureMode
from orchestrator.runtime import LABEL_JOB, LABEL_KIND, LABEL_TRIAL, ContainerSpec
from orchestrator.runtime.fake import FakeRuntime, Ran
from orchestrator.tasks.load import load_task
from orchestrator.trial.context import TrialContext
from orchestrator.trial.images import TaskImages
from orchestrator.trial.lifecycle import run_trial
from orchestrator.trial.trust import CA_PATH, CA_VARIABLES, trust_for

IMAGE = "orchestra/task/fake:1"
SIDECAR_IMAGE = "redis:7-alpine"
TEST_SH = "/tests/test.sh"
GVISOR = "runsc"


class Recording(FakeRuntime):
    """The fake, keeping every ContainerSpec it was asked to create."""

    def __init__(self) -> None:
        super().__init__(oci_runtimes=("runc", GVISOR))
        self.specs: list[ContainerSpec] = []

    def create(self, spec: ContainerSpec) -> str:
        self.specs.append(spec)
        return super().create(spec)


@pytest.fixture
def rt() -> Recording:
    fake = Recording()
    for image in (IMAGE, SIDECAR_IMAGE):
        fake.add_image(image, workdir="/app")
    fake.on_exec(TEST_SH, Ran(writes={"/logs/verifier/reward.txt": b"1\n"}))
    return fake


@pytest.fixture
def ctx(rt: Recording, tmp_path: Path) -> Iterator[TrialContext]:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    networks = NetworkPool(rt, "fake-job", keep=0)
    manifest = Manifest(condition="nop-team", roster=[
        RosterMember(id="lead", kind="orchestrator", agent="nop"),
        RosterMember(id="helper", kind="worker", agent="command", command="true")])
    context = TrialContext(
        runtime=rt, job="fake-job", job_dir=tmp_path / "job", condition="nop-team",
        condition_hash="0" * 12, agent_id="lead", agent=agent_for(manifest.roster[0]), policy="memory-off",
        images_for=lambda task: TaskImages(task_image=IMAGE, agent_image=IMAGE),
        cancel=threading.Event(), watchdog=DiskWatchdog(rt, "fake-job"), networks=networks,
        manifest=manifest, oci_runtime=GVISOR, trust=trust_for(bundle))
    yield context
    networks.close()


TOML = """\
[agent]
timeout_sec = 30
[environment]
cpus = 2
memory_mb = 1024
[verifier]
timeout_sec = 20
environment_mode = "separate"
[verifier.environment]
cpus = 1
memory_mb = 512
"""
COMPOSE = f"""\
services:
  main:
    build: .
  cache:
    image: {SIDECAR_IMAGE}
"""


def _check(spec: ContainerSpec, trial_id: str, bundle: Path, quotas: tuple[float, int]) -> None:
    kind = spec.labels[LABEL_KIND]
    assert spec.labels[LABEL_JOB] == "fake-job" and spec.labels[LABEL_TRIAL] == trial_id, kind
    assert owner_labels().items() <= spec.labels.items(), kind  # what reap finds
    assert spec.read_only_binds[str(bundle.resolve())] == CA_PATH, kind
    assert all(spec.env[v] == CA_PATH for v in CA_VARIABLES), kind
    assert spec.runtime == GVISOR, kind
    assert (spec.cpus, spec.memory_mb) == quotas, kind
    assert spec.pids_limit > 0, kind


def test_the_agent_a_sidecar_and_a_separate_verifier_get_labels_trust_runtime_and_quotas(
        rt: Recording, ctx: TrialContext, tmp_path: Path) -> None:
    ctx.manifest = Manifest(condition="nop", roster=[ctx.manifest.roster[0]])  # no worker
    task = load_task(make_task(tmp_path / "tasks", "t", toml=TOML,
                               files={"environment/docker-compose.yaml": COMPOSE}))
    result = run_trial(ctx, task, attempt=1)
    assert result.failure_mode == FailureMode.NONE and result.reward == {"reward": 1.0}, result.error
    assert sorted(s.labels[LABEL_KIND] for s in rt.specs) == ["agent", "sidecar", "verifier"]
    quotas = {"agent": (2.0, 1024), "sidecar": (2.0, 1024), "verifier": (1.0, 512)}  # [verifier.environment]
    for spec in rt.specs:
        _check(spec, result.trial_id, tmp_path / "ca.pem", quotas[spec.labels[LABEL_KIND]])
    assert rt.containers == {}  # all removed


def test_a_worker_gets_them_too(rt: Recording, ctx: TrialContext, tmp_path: Path) -> None:
    """The fake has no 'spawn' part (a worker's background command), so the trial ends a
    launch error (NotSupported, never retried) after the worker's container was made."""
    task = load_task(make_task(tmp_path / "tasks", "t", toml=TOML))
    result = run_trial(ctx, task, attempt=1)
    assert result.failure_mode == FailureMode.LAUNCH_ERROR and "spawn" in (result.error or "")
    [worker] = [s for s in rt.specs if s.labels[LABEL_KIND] == "worker"]
    _check(worker, result.trial_id, tmp_path / "ca.pem", (2.0, 1024))
    assert worker.env["ORCHESTRA_AGENT_ID"] == "helper"
    assert rt.containers == {}
