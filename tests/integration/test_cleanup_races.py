"""Clean-up races never fail a finished job: removal is idempotent everywhere.

Two removers meeting at one object (a trial's own clean-up and a reaper, two Ray nodes'
reapers on one engine) get "no such object" or 409 "removal already in progress" from the
engine; both must return normally, the object must be gone, and the job must exit 0.
"""

from __future__ import annotations

import threading
import uuid

from conftest import make_task
from typer.testing import CliRunner

from orchestrator.cli import commands as cli
from orchestrator.host.cleanup import owner_labels
from orchestrator.models.result import TrialResult
from orchestrator.runtime import docker as docker_runtime
from orchestrator.runtime.base import ContainerSpec
from orchestrator.runtime.docker import DockerRuntime


class RivalRemover(DockerRuntime):
    """The real engine; every container or network removal is raced by a second remover
    that calls the engine directly at the same moment (a barrier lines both up)."""

    races = 0
    rival_errors: list[str] = []

    def _race(self, raw, target: str) -> None:
        barrier = threading.Barrier(2)

        def rival():
            barrier.wait()
            try:
                raw(target)
            except Exception as exc:  # the rival is allowed to lose
                RivalRemover.rival_errors.append(str(exc)[:120])

        thread = threading.Thread(target=rival)
        thread.start()
        barrier.wait()
        RivalRemover.races += 1
        return thread

    def remove(self, container: str) -> None:
        rival = self._race(lambda c: self.api.remove_container(c, force=True), container)
        try:
            super().remove(container)
        finally:
            rival.join()

    def remove_network(self, name: str) -> None:
        rival = self._race(self.api.remove_network, name)
        try:
            super().remove_network(name)
        finally:
            rival.join()


def _sleeper(runtime: DockerRuntime, network: str, label: str) -> str:
    spec = ContainerSpec(image="orchestra/base:bookworm", name=f"race-{uuid.uuid4().hex[:8]}",
                       labels={"orchestra.job": label, "orchestra.kind": "agent",
                               **owner_labels()},
                       command=["sleep", "infinity"], cpus=0.5, memory_mb=64, pids_limit=32,
                       network=network)
    container = runtime.create(spec)
    runtime.start(container)
    return container


def test_two_removers_racing_for_a_container_and_its_network_both_succeed(runtime):
    label = f"race-{uuid.uuid4().hex[:8]}"
    for _round in range(4):
        network = runtime.create_network(f"{label}-{_round}", internal=True,
                                         labels={"orchestra.job": label, **owner_labels()})
        container = _sleeper(runtime, network.name, label)
        errors: list[BaseException] = []
        barrier = threading.Barrier(2)

        def remover(barrier=barrier, container=container, network=network, errors=errors):
            barrier.wait()
            try:
                runtime.remove(container)
                runtime.remove_network(network.name)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=remover) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        assert not runtime._exists(runtime.api.inspect_container, container)
        assert not runtime._exists(runtime.api.inspect_network, network.name)
    assert runtime.labelled(f"orchestra.job={label}") == ([], [], [])


def test_removing_what_is_already_gone_is_success(runtime):
    runtime.remove("orchestra-no-such-container")
    runtime.remove_network("orchestra-no-such-network")
    runtime.remove_volume("orchestra-no-such-volume")
    runtime.remove_image("orchestra/no-such-image:0")


def test_a_job_whose_removals_are_all_raced_exits_0_with_every_trial_graded(
        runtime, tmp_path, monkeypatch):
    for name in ("one", "two", "three"):
        make_task(tmp_path / "ds", name, solve="touch /app/ok\n")
    monkeypatch.setattr(docker_runtime, "DockerRuntime", RivalRemover)
    monkeypatch.setenv("ORCHESTRA_NETWORK_POOL", "0")  # the job's networks are removed (and raced) too
    RivalRemover.races, RivalRemover.rival_errors = 0, []
    outcome = CliRunner().invoke(cli.app, [
        "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-k", "2", "-n", "3",
        "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "raced", "-q"])
    assert outcome.exit_code == 0, outcome.output
    trials = [TrialResult.model_validate_json(p.read_text())
              for p in (tmp_path / "jobs" / "raced" / "trials").glob("*/result.json")]
    assert len(trials) == 6
    assert {t.failure_mode.value for t in trials} == {"none"}
    assert [t.reward["reward"] for t in trials] == [1.0] * 6
    assert all(not t.retries for t in trials)
    # Every trial's container removal (and the job's networks) really was raced, and the
    # rival did win some of them (its loser answers are the engine's race errors).
    assert RivalRemover.races >= 6
    assert runtime.labelled("orchestra.job=raced") == ([], [], [])
