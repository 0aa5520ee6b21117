"""Images ahead of trials and admission by policy, on the real engine: two `cpus = 2` tasks
on a 2-cpu budget run side by side under cpu-limit (their agent phases overlap, read from
the trials' recorded phase times) and one after the other under reserve; the containers
still get NanoCpus = 2e9 (read back from inspect); a task whose image cannot build fails
each of its k trials with that one build, built once."""

from __future__ import annotations

import uuid

from conftest import make_task

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import FailureMode, TrialResult
from orchestrator.paths import JobDir
from orchestrator.tasks.load import load_tasks

TWO_CPUS = "[environment]\ncpus = 2\nmemory_mb = 512\n[agent]\ntimeout_sec = 60\n"


def _run(runtime, path, jobs_dir, admission, k=1, n=2):
    options = JobOptions(job_name=f"pool-{uuid.uuid4().hex[:8]}", jobs_dir=jobs_dir, n_concurrent=n,
                         k=k, max_cpus=2, admission=admission, build_workers=2)
    job = run_job(runtime, load_tasks(path), default_manifest("oracle"), options)
    trials = [TrialResult.model_validate_json(p.read_text())
              for p in sorted((jobs_dir / options.job_name / "trials").glob("*/result.json"))]
    return job, trials


def _agent_phase(t: TrialResult) -> tuple[float, float]:
    """When the trial's agent phase ran, from its recorded start and phase durations."""
    begin = t.started_at + t.timings.build + t.timings.start + t.timings.seed
    return begin, begin + t.timings.agent


def _overlap(a: TrialResult, b: TrialResult) -> bool:
    (a0, a1), (b0, b1) = _agent_phase(a), _agent_phase(b)
    return a0 < b1 and b0 < a1


def test_two_cpus_2_tasks_share_the_cores_under_cpu_limit_and_queue_under_reserve(runtime, tmp_path):
    tag = uuid.uuid4().hex[:12]  # a fresh image per run: the pool builds both, cold
    for name in ("left", "right"):
        make_task(tmp_path / "tasks", name, toml=TWO_CPUS, solve="sleep 3\ntouch /app/ok\n",
                  dockerfile=f"FROM python:3.12-slim-bookworm\nWORKDIR /app\nRUN echo {name}-{tag} > /built\n")
    job, trials = _run(runtime, tmp_path / "tasks", tmp_path / "jobs", "cpu-limit")
    assert job.admission == "cpu-limit" and [t.reward for t in trials] == [{"reward": 1.0}] * 2
    assert job.peak_cpus == 4  # declared cpus running at once: past the 2-cpu budget
    assert all(t.limits is not None and t.limits.nano_cpus == 2_000_000_000 for t in trials)
    assert sorted(b.task.split("/")[-1] for b in job.builds) == ["left", "right"]
    assert all(b.error is None and b.built >= 1 for b in job.builds)
    # each trial started once its own images existed, and found them built
    for t in trials:
        build = next(b for b in job.builds if b.task == t.task)
        assert build.finished_at <= t.started_at
    assert _overlap(*trials)

    job, trials = _run(runtime, tmp_path / "tasks", tmp_path / "jobs", "reserve")  # warm now
    assert job.admission == "reserve" and job.peak_cpus == 2
    assert all(b.built == 0 for b in job.builds)
    assert not _overlap(*trials)


def test_a_build_failure_is_the_tasks_said_once_for_all_its_trials(runtime, tmp_path):
    make_task(tmp_path / "tasks", "broken",
              dockerfile=f"FROM python:3.12-slim-bookworm\nRUN echo {uuid.uuid4().hex} && exit 3\n")
    make_task(tmp_path / "tasks", "fine", solve="touch /app/ok\n")
    job, trials = _run(runtime, tmp_path / "tasks", tmp_path / "jobs", "cpu-limit", k=3)
    broken = [t for t in trials if t.task.endswith("broken")]
    assert len(broken) == 3
    assert {t.failure_mode for t in broken} == {FailureMode.BUILD_ERROR}
    assert len({t.error for t in broken}) == 1 and "exit" in (broken[0].error or "")
    assert all(not t.retries for t in broken)
    assert [b.task.split("/")[-1] for b in job.builds if b.error] == ["broken"]  # one build, failed
    assert [t.reward for t in trials if t.task.endswith("fine")] == [{"reward": 1.0}] * 3


def test_two_tasks_beginning_alike_build_their_shared_step_once_the_second_from_the_cache(runtime, tmp_path):
    """Two tasks whose Dockerfiles share a RUN step (then COPY different data), two
    builders: the second build starts when the first is done and finds the step in the
    engine's cache, so both images hold the very file that step wrote once (the time it ran,
    to the nanosecond; run twice it would differ); a third task, sharing nothing, builds
    beside the first."""
    tag = uuid.uuid4().hex[:12]
    shared = f"FROM python:3.12-slim-bookworm\nWORKDIR /app\nRUN sleep 2 && date +%s%N > /built-{tag}\n"
    test = f"mkdir -p /logs/verifier\ncp /built-{tag} /logs/verifier/built.txt\necho 1 > /logs/verifier/reward.txt\n"
    for name in ("one", "two"):
        make_task(tmp_path / "tasks", name, files={"environment/data.txt": name}, test=test,
                  dockerfile=shared + "COPY data.txt /app/data.txt\n")
    make_task(tmp_path / "tasks", "other", test=test,
              dockerfile=f"FROM python:3.12-slim-bookworm\nRUN sleep 2 && date +%s%N > /built-{tag}\n")
    job, trials = _run(runtime, tmp_path / "tasks", tmp_path / "jobs", "cpu-limit")
    assert [t.reward for t in trials] == [{"reward": 1.0}] * 3
    builds = {b.task.split("/")[-1]: b for b in job.builds}
    first, second = sorted((builds["one"], builds["two"]), key=lambda b: b.started_at)
    assert second.started_at >= first.finished_at and (first.shared_steps, second.shared_steps) == (0, 1)
    assert builds["other"].started_at < first.finished_at  # beside the first, not after it
    folder = JobDir(tmp_path / "jobs" / trials[0].job)
    stamps = {t.task.split("/")[-1]: (folder.find_trial(t.trial_id) / "verifier" / "built.txt").read_text().strip()
              for t in trials}
    assert stamps["one"] == stamps["two"] != stamps["other"]  # one step run once; the other its own
