"""The trial's failure classification, retries and clean-up, run for real (trial/lifecycle.py
run_trial: every phase, the sandbox, the verifier) against FakeRuntime: the agent and
test.sh are scripted commands, engine faults are injected. What each failure makes of the
trial (failure_mode, whether the scheduler retries it) and that nothing is left in the
runtime afterwards; then whole jobs (run_job) on the fake, for the scheduler's retries.
No engine and no sleeping (retries back off 0 s): the file runs in well under a second."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_task

from orchestrator.agents.base import Plain
from orchestrator.errors import InputError, RuntimeFault
from orchestrator.host.netpool import NetworkPool
from orchestrator.host.watchdog import DiskWatchdog
from orchestrator.job.runner import JobOptions, run_job
from orchestrator.job.scheduler import RETRYABLE
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import FailureMode, JobResult, TrialResult
from orchestrator.runtime.fake import FakeExec, FakeRuntime, Ran
from orchestrator.tasks.load import Task, load_task, load_tasks
from orchestrator.trial.context import TrialContext
from orchestrator.trial.images import TaskImages
from orchestrator.trial.lifecycle import run_trial

IMAGE = "orchestra/task/fake:1"
AGENT = "run-the-agent"  # the agent's command line, as the trial wraps it
TEST_SH = "/tests/test.sh"  # in the verifier's command line


class Scripted(Plain):
    """An agent whose command is AGENT: what it does is the fake's script."""

    name = "scripted"

    def files(self, task: Task) -> dict[str, bytes]:
        return {}

    def env(self, task: Task) -> dict[str, str]:
        return {}

    def command(self, task: Task) -> str | None:
        return AGENT


def graded(reward: str = "1") -> Ran:
    return Ran(writes={"/logs/verifier/reward.txt": reward.encode() + b"\n"})


@pytest.fixture
def rt() -> FakeRuntime:
    fake = FakeRuntime()
    fake.add_image(IMAGE, workdir="/app")
    fake.on_exec(AGENT, Ran(writes={"/app/ok": b""}))
    fake.on_exec(TEST_SH, graded())
    return fake


@pytest.fixture
def trial(rt: FakeRuntime, tmp_path: Path) -> Iterator[TrialContext]:
    networks = NetworkPool(rt, "fake-job", keep=0)
    ctx = TrialContext(
        runtime=rt, job="fake-job", job_dir=tmp_path / "job", condition="scripted",
        condition_hash="0" * 12, agent_id="lead", agent=Scripted(), policy="memory-off",
        images_for=lambda task: TaskImages(task_image=IMAGE, agent_image=IMAGE),
        cancel=threading.Event(), watchdog=DiskWatchdog(rt, "fake-job"), networks=networks,
        manifest=default_manifest("command"))
    yield ctx
    networks.close()
    assert rt.networks == {}  # the job's networks go with it


def run(ctx: TrialContext, tmp_path: Path, toml: str = "") -> TrialResult:
    task = load_task(make_task(tmp_path / "tasks", "t", toml=toml or
                               "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 20\n"))
    result = run_trial(ctx, task, attempt=1)
    assert ctx.runtime.containers == {}, "the trial's clean-up always runs"  # type: ignore[attr-defined]
    assert ctx.runtime.volumes == {}  # type: ignore[attr-defined]
    assert TrialResult.model_validate_json((Path(ctx.job_dir) / "trials").glob("*/result.json")
                                           .__next__().read_text()) == result  # written, whole
    return result


def retried(result: TrialResult) -> bool:
    """What the scheduler (job/scheduler.py) retries."""
    return result.failure_mode in RETRYABLE and result.not_retried is None


def test_an_agent_that_does_the_task_is_graded_with_its_reward(rt, trial, tmp_path):
    result = run(trial, tmp_path)
    assert (result.failure_mode, result.reward, result.agent_exit_code) == (FailureMode.NONE, {"reward": 1.0}, 0)
    assert result.limits.memory_bytes == 2048 * 1024 * 1024  # task.toml's default, read back
    assert rt.calls.count("create") == 1 and "kill" not in rt.calls  # shared mode: graded live
    assert not retried(result)


def test_an_agent_past_its_timeout_is_agent_timeout_killed_and_still_graded(rt, trial, tmp_path):
    rt.on_exec(AGENT, Ran(seconds=10_000))
    result = run(trial, tmp_path)
    assert result.failure_mode == FailureMode.AGENT_TIMEOUT and result.agent_exit_code is None
    assert "timeout_sec=30" in (result.error or "")
    assert "kill" in rt.calls  # nothing outlives the deadline
    assert result.reward == {"reward": 1.0} and "restarted" in (result.verifier_note or "")
    assert not retried(result)


def test_an_agent_killed_by_the_oom_killer_is_oom(rt, trial, tmp_path):
    rt.on_exec(AGENT, Ran(oom=True))
    result = run(trial, tmp_path)
    assert (result.failure_mode, result.agent_exit_code) == (FailureMode.OOM, 137)
    assert "memory_mb=" in (result.error or "") and not retried(result)


def test_an_agent_that_fails_by_itself_is_graded_not_an_error(rt, trial, tmp_path):
    rt.on_exec(AGENT, Ran(exit_code=2))
    rt.on_exec(TEST_SH, graded("0"))
    result = run(trial, tmp_path)
    assert (result.failure_mode, result.agent_exit_code, result.reward) == (FailureMode.NONE, 2, {"reward": 0.0})
    assert result.agent_outcome == "crashed"


def test_a_container_that_cannot_be_created_is_a_launch_error_retried(rt, trial, tmp_path):
    rt.fail("create")
    result = run(trial, tmp_path)
    assert result.failure_mode == FailureMode.LAUNCH_ERROR and "injected into create" in (result.error or "")
    assert retried(result) and result.reward is None


def test_a_missing_oci_runtime_is_a_launch_error_never_retried(rt, trial, tmp_path):
    trial.oci_runtime = "runsc"  # the fake has runc only
    result = run(trial, tmp_path)
    assert result.failure_mode == FailureMode.LAUNCH_ERROR and "runsc" in (result.error or "")
    assert not retried(result) and "RuntimeMissing" in (result.not_retried or "")


def test_the_engine_failing_mid_trial_is_an_infra_error_retried(rt, trial, tmp_path):
    rt.fail("exec")  # the agent's command: the engine fails under it
    result = run(trial, tmp_path)
    assert result.failure_mode == FailureMode.INFRA_ERROR and "RuntimeFault" in (result.error or "")
    assert retried(result) and result.reward is None


def test_the_engine_failing_while_copying_out_is_an_infra_error_retried(rt, trial, tmp_path):
    rt.fail("get_archive", error=RuntimeFault("the engine connection broke"))
    result = run(trial, tmp_path)
    assert result.failure_mode == FailureMode.INFRA_ERROR and retried(result)


def test_a_verifier_past_its_timeout_is_verifier_timeout(rt, trial, tmp_path):
    rt.on_exec(TEST_SH, Ran(seconds=10_000))
    result = run(trial, tmp_path)
    assert result.failure_mode == FailureMode.VERIFIER_TIMEOUT and result.reward is None
    assert "timeout_sec=20" in (result.error or "") and not retried(result)


def test_a_verifier_that_writes_no_reward_is_verifier_error(rt, trial, tmp_path):
    rt.on_exec(TEST_SH, Ran())
    result = run(trial, tmp_path)
    assert result.failure_mode == FailureMode.VERIFIER_ERROR and not retried(result)


def test_a_part_the_runtime_lacks_is_a_launch_error_never_retried(rt, trial, tmp_path):
    """Snapshot mode needs Part.COMMIT, which the fake lacks (pre-flight refuses a job that
    needs it; a trial that reaches it anyway is final, not retried)."""
    result = run(trial, tmp_path, toml="[agent]\ntimeout_sec = 30\n"
                                       "[verifier]\nenvironment_mode = \"snapshot\"\n")
    assert result.failure_mode == FailureMode.LAUNCH_ERROR and "commit" in (result.error or "")
    assert not retried(result) and "NotSupported" in (result.not_retried or "")


def test_a_separate_verifier_runs_in_its_own_container_and_both_are_removed(rt, trial, tmp_path):
    seen: list[str] = []

    def grade(call: FakeExec) -> Ran:  # the fresh container's own command
        seen.append(call.container.spec.name)
        return graded()

    rt.on_exec(TEST_SH, grade)
    result = run(trial, tmp_path, toml="[agent]\ntimeout_sec = 30\n"
                                       "[verifier]\nenvironment_mode = \"separate\"\n")
    assert result.failure_mode == FailureMode.NONE and result.reward == {"reward": 1.0}
    assert [name.rsplit("-", 1)[-1] for name in seen] == ["verifier"]
    assert rt.calls.count("create") == 2


# ---- a whole job on the fake: the scheduler's retries, for real -------------------------------
@pytest.fixture
def job_rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRuntime]:
    monkeypatch.setenv("ORCHESTRA_NETWORK_POOL", "0")  # nothing parked: the fake ends empty
    fake = FakeRuntime()
    fake.add_image("python:3.12-slim-bookworm", workdir="/app")  # make_task's FROM
    fake.on_exec(TEST_SH, graded())
    before = set(threading.enumerate())
    yield fake
    assert fake.containers == {} and fake.networks == {} and fake.volumes == {}
    assert [t.name for t in set(threading.enumerate()) - before] == []  # the job's threads ended with it


def run_job_on(rt: FakeRuntime, tmp_path: Path, toml: str = "") -> tuple[JobResult, TrialResult]:
    make_task(tmp_path / "tasks", "t", toml=toml)
    options = JobOptions(job_name="fake-job", jobs_dir=tmp_path / "jobs", n_concurrent=1,
                         backoff_multiplier=0.0)
    job = run_job(rt, load_tasks(tmp_path / "tasks"), default_manifest("nop"), options)
    [path] = (tmp_path / "jobs" / "fake-job" / "trials").glob("*/result.json")
    return job, TrialResult.model_validate_json(path.read_text())


def test_a_job_retries_a_trial_the_engine_failed_and_keeps_the_good_attempt(job_rt, tmp_path):
    job_rt.fail("exec")  # the first command of the first attempt (the verifier's: nop runs nothing)
    job, trial = run_job_on(job_rt, tmp_path)
    assert (job.retried, job.counts, job.mean_reward) == (1, {"none": 1}, 1.0)
    assert trial.failure_mode == FailureMode.NONE and len(trial.retries) == 1
    assert "injected into exec" in trial.retries[0]
    assert job_rt.calls.count("create") == 2  # one sandbox per attempt, both removed


def test_a_job_gives_up_after_max_retries(job_rt, tmp_path):
    job_rt.fail("create", times=3)
    job, trial = run_job_on(job_rt, tmp_path)
    assert (job.retried, job.counts) == (1, {"launch_error": 1})  # trials retried: 1
    assert trial.failure_mode == FailureMode.LAUNCH_ERROR and len(trial.retries) == 2  # max_retries
    assert job_rt.calls.count("create") == 3


def test_a_job_needing_a_part_the_runtime_lacks_stops_before_any_spend(job_rt, tmp_path):
    """Pre-flight (job/preflight.py parts_needed): snapshot mode needs Part.COMMIT."""
    with pytest.raises(InputError, match="verifier environment_mode = snapshot: needs the runtime's 'commit' part"):
        run_job_on(job_rt, tmp_path, toml="[verifier]\nenvironment_mode = \"snapshot\"\n")
    assert not {"build_image", "create", "create_network"} & set(job_rt.calls)
