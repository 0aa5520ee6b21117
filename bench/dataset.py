"""The dataset benchmark (issue 48): a generated folder of tasks shaped like real ones, run
end to end cold (the dataset's images removed first, a fresh nonce in every Dockerfile so
no build layer is cached) with the oracle agent, 2 at a time, and its wall time set
against its critical path and its ideal. `python bench/run.py dataset` (or this file) runs
it; `name=value` lines, nothing asserted (these machines are noisy).

The tasks: `cpus = 2`, `memory_mb = 512`, Harbor's separate verifier with its own
tests/Dockerfile; builds that do real work offline (a venv with pip from Python's bundled
wheel, compressing random data, hashing: the CPU and disk shape of apt and pip builds
without a network); oracle solutions that either compute (CPU-bound, ~2 s of hashing) or
wait (a sleep, as a task that waits on a server does); a verifier that recomputes the
answer.

Three configurations, each cold: `before` (reserve admission, no build pool: each trial
builds its own images, as orchestra did until issue 48; with `cpus = 2` on a 2-cpu host it
runs one trial at a time, so its trials' times are the tasks' uncontended chains: their
builds, then agent and grading), `reserve` and `cpu-limit` (the build pool, under each
admission policy: the default settings are `reserve`). From `before`'s records:
  dataset_chain_seconds          the longest chain: one task's builds, then its trial
  dataset_ideal_seconds          the sum of those chains (every build and trial phase)
                                 over the slots (2)
  dataset_build_share            of that sum, the build phases' share (the task image and
                                 agent layer; the verifier's image builds in the verify
                                 phase, not counted; the issue's 133 real tasks: 0.70)
Per configuration:
  dataset_<config>_wall_seconds  run_job, start to end
  dataset_<config>_vs_chain      wall over the longest chain
  dataset_<config>_vs_ideal      wall over the ideal
  dataset_<config>_mean_reward   (the same in every configuration: 1.0)
  dataset_vs_critical_path       the default (`reserve`) wall over the critical path at the
                                 host's parallelism, max(chain, ideal) (target <= 1.25)
One run of each, on a shared machine: read the ratios, not the seconds.
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ORCHESTRA_DURATIONS", "")  # the job's order is the folder's, every run

from orchestrator.job.runner import JobOptions, run_job  # noqa: E402
from orchestrator.models.manifest import default_manifest  # noqa: E402
from orchestrator.models.result import JobResult, TrialResult  # noqa: E402
from orchestrator.tasks.load import load_tasks  # noqa: E402

PREFIX = "benchds"
BASE = "python:3.12-slim-bookworm"
SLOTS = 2
CONFIGS = (("before", "reserve", 0), ("reserve", "reserve", None), ("cpu-limit", "cpu-limit", None))

HASHING = ("python3 -c \"import hashlib; d=b'x'*2**20; h=hashlib.sha256(); "
           "[h.update(d) for _ in range({n})]; print(h.hexdigest())\"")


def make_dataset(root: Path, n: int, nonce: str) -> Path:
    """n tasks under root/tasks, builds of different lengths, half computing, half waiting."""
    tasks = root / "tasks"
    for i in range(n):
        task = tasks / f"{PREFIX}-{i:02d}"
        (task / "environment").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "solution").mkdir()
        (task / "instruction.md").write_text(f"Write the answer for task {i} to /logs/artifacts/answer.txt.\n")
        (task / "task.toml").write_text(textwrap.dedent("""\
            [agent]
            timeout_sec = 120
            [verifier]
            environment_mode = "separate"
            timeout_sec = 120
            [environment]
            cpus = 2
            memory_mb = 512
            """))
        venv = "RUN python3 -m venv /opt/venv && /opt/venv/bin/pip --version\n" if i % 2 == 0 else ""
        (task / "environment" / "Dockerfile").write_text(
            f"FROM {BASE}\nRUN echo {nonce}-{i} > /etc/bench-nonce\nWORKDIR /app\n{venv}"
            f"RUN head -c {24 * (1 + i % 4)}M /dev/urandom > /opt/data.bin && gzip -6 /opt/data.bin\n"
            f"RUN {HASHING.format(n=400 * (1 + i % 3))} > /opt/digest\n")
        (task / "tests" / "Dockerfile").write_text(
            f"FROM {BASE}\nRUN echo {nonce}-{i}-verifier > /etc/bench-nonce\n"
            f"RUN {HASHING.format(n=200)} > /opt/tool\nCOPY test.sh /tests/test.sh\n")
        answer = f"python3 -c \"import hashlib; print(hashlib.sha256(b'task-{i}').hexdigest())\""
        work = HASHING.format(n=3000) + " > /dev/null\n" if i % 2 == 0 else "sleep 3\n"
        (task / "solution" / "solve.sh").write_text(
            f"#!/bin/bash\nset -e\n{work}mkdir -p /logs/artifacts\n{answer} > /logs/artifacts/answer.txt\n")
        (task / "tests" / "test.sh").write_text(
            f"#!/bin/bash\nmkdir -p /logs/verifier\nwant=$({answer})\n"
            "if [ \"$(cat /logs/artifacts/answer.txt 2>/dev/null)\" = \"$want\" ]; then echo 1; "
            "else echo 0; fi > /logs/verifier/reward.txt\n")
    return tasks


def remove_images(runtime) -> int:
    """The dataset's task, agent and verifier images (by orchestra's task label): cold."""
    removed = 0
    for image in runtime.api.images(filters={"label": "orchestra.image.task"}):
        if (image.get("Labels") or {}).get("orchestra.image.task", "").split("/")[-1].startswith(PREFIX):
            try:
                runtime.api.remove_image(image["Id"], force=True)
                removed += 1
            except Exception:  # already gone with a child
                pass
    return removed


def run(runtime, root: Path, n: int, name: str, admission: str,
        build_workers: int | None) -> tuple[float, JobResult, list[TrialResult]]:
    """One cold job of a fresh copy of the dataset: (wall seconds, its result, its trials)."""
    remove_images(runtime)
    tasks = make_dataset(root / name, n, uuid.uuid4().hex[:12])
    options = JobOptions(job_name=f"dataset-{name}", jobs_dir=root / "jobs", n_concurrent=SLOTS, k=1,
                         admission=admission, build_workers=build_workers)
    started = time.perf_counter()
    job = run_job(runtime, load_tasks(tasks), default_manifest("oracle"), options)
    wall = time.perf_counter() - started
    trials = [TrialResult.model_validate_json(p.read_text())
              for p in sorted((root / "jobs" / options.job_name / "trials").glob("*/result.json"))]
    remove_images(runtime)
    return wall, job, trials


def chains(trials: list[TrialResult]) -> tuple[float, float, float]:
    """From a run of one trial at a time whose trials build their own images: (the longest
    chain, the ideal over SLOTS, the builds' share of all phases)."""
    seconds = [(t.finished_at or t.started_at) - t.started_at for t in trials]
    builds = sum(t.timings.build for t in trials)
    return max(seconds), sum(seconds) / SLOTS, builds / sum(seconds)


def dataset(emit, n: int = 6) -> None:
    from orchestrator.runtime.docker import DockerRuntime

    runtime = DockerRuntime(max_pool_size=16)
    emit("dataset_tasks", n)
    with tempfile.TemporaryDirectory(prefix="bench-dataset-") as name:
        chain = ideal = 0.0
        for config, admission, workers in CONFIGS:
            wall, job, trials = run(runtime, Path(name), n, config, admission, workers)
            if config == "before":
                chain, ideal, share = chains(trials)
                emit("dataset_chain_seconds", round(chain, 1))
                emit("dataset_ideal_seconds", round(ideal, 1))
                emit("dataset_build_share", round(share, 2))
            emit(f"dataset_{config}_wall_seconds", round(wall, 1))
            emit(f"dataset_{config}_vs_chain", round(wall / chain, 2))
            emit(f"dataset_{config}_vs_ideal", round(wall / ideal, 2))
            emit(f"dataset_{config}_images_built", job.images_built)
            emit(f"dataset_{config}_mean_reward", job.mean_reward)
            if config == "reserve":  # the default settings
                emit("dataset_vs_critical_path", round(wall / max(chain, ideal), 2))


if __name__ == "__main__":
    from orchestrator import log as logsetup

    logsetup.configure()
    dataset(lambda key, value: print(f"{key}={value}", flush=True),
            int(sys.argv[1]) if len(sys.argv) > 1 else 6)
