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

Three configurations, each cold: `before` (the defaults until issue 48: reserve
admission, no build pool, each trial building its own images; with `cpus = 2` on a 2-cpu
host it runs one trial at a time, so its trials' times are the tasks' uncontended chains:
their builds, then agent and grading), `reserve` (the build pool, cpus reserved) and
`cpu-limit` (the build pool, cpus a limit: today's defaults); then `warm` (reserve, images
kept: each trial alone, its agent and grading without any build). From `before` and `warm`:
  dataset_chain_seconds          the longest chain: one task's builds, then its trial
  dataset_ideal_seconds          the sum of those chains (every build and trial phase)
                                 over the slots (2)
  dataset_reserve_floor_seconds  what `reserve` cannot beat on this host: the shortest
                                 build, then every trial one after another (a `cpus = 2`
                                 trial holds both cpus: one at a time)
  dataset_critical_path_seconds  max(chain, ideal): the longest chain of builds and trials
                                 at the host's parallelism (2 slots)
  dataset_reserve_critical_path_seconds  max(chain, ideal, reserve floor): the same under
                                 reserve, whose trials of 2 cpus cannot overlap
  dataset_build_share            of that sum, the builds' share (task image, agent layer
                                 and the verifier's image: a chain less its warm trial;
                                 the issue's 133 real tasks: 0.70)
Per configuration:
  dataset_<config>_wall_seconds  run_job, start to end
  dataset_<config>_vs_chain      wall over the longest chain
  dataset_<config>_vs_ideal      wall over the ideal (cpu-limit's bound: trials share cpus)
  dataset_<config>_mean_reward   (the same in every configuration: 1.0)
  dataset_vs_critical_path       the defaults' (`cpu-limit`, the pool) wall over the
                                 critical path (target <= 1.25)
  dataset_reserve_vs_critical_path  `reserve`'s wall over its own critical path
The orchestrator's memory with the build pool:
  dataset_peak_rss_mb_16_cold_<pool|no_pool>  `orchestra run` (its own process) of 16 small
                                 tasks, each its own Dockerfile, cold, 16 at a time, with the
                                 pool (default) and with --build-ahead 0
And then the same tasks side by side with Harbor (bench/harbor.py, one round, cold and
warm): harbor_vs_orchestra (cold), harbor_vs_orchestra_warm.
One run of each, on a shared machine: read the ratios, not the seconds.
"""

from __future__ import annotations

import os
import subprocess
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
from orchestrator.paths import JobDir  # noqa: E402
from orchestrator.tasks.load import load_tasks  # noqa: E402

PREFIX = "benchds"
BASE = "python:3.12-slim-bookworm"
SLOTS = 2
CONFIGS = (("before", "reserve", 0), ("reserve", "reserve", None), ("cpu-limit", "cpu-limit", None))
TRIALS_AT_ONCE_RESERVED = 1  # cpus = 2 tasks on a 2-cpu budget under reserve

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


def run(runtime, root: Path, n: int, name: str, admission: str, build_workers: int | None,
        tasks: Path | None = None) -> tuple[float, JobResult, list[TrialResult]]:
    """One job of the dataset: cold (a fresh copy, its images removed before and after)
    unless `tasks` is given (warm: that copy, its images kept). (wall seconds, result, trials)."""
    if tasks is None:
        remove_images(runtime)
        tasks = make_dataset(root / name, n, uuid.uuid4().hex[:12])
    options = JobOptions(job_name=f"dataset-{name}", jobs_dir=root / "jobs", n_concurrent=SLOTS, k=1,
                         admission=admission, build_workers=build_workers)
    started = time.perf_counter()
    job = run_job(runtime, load_tasks(tasks), default_manifest("oracle"), options)
    wall = time.perf_counter() - started
    trials = [TrialResult.model_validate_json(p.read_text())
              for p in JobDir(root / "jobs" / options.job_name).trial_results()]
    return wall, job, trials


def seconds_by_task(trials: list[TrialResult]) -> dict[str, float]:
    return {t.task: (t.finished_at or t.started_at) - t.started_at for t in trials}


def critical_path(before: list[TrialResult], warm: list[TrialResult]) -> dict[str, float]:
    """From a cold run of one trial at a time whose trials build their own images (each
    task's chain) and a warm one (each task's trial alone): the chain, the ideal over the
    slots, reserve's floor, the critical path and the builds' share."""
    chains, trials = seconds_by_task(before), seconds_by_task(warm)
    builds = {task: max(0.0, chains[task] - trials.get(task, 0.0)) for task in chains}
    chain, ideal = max(chains.values()), sum(chains.values()) / SLOTS
    floor = min(builds.values()) + sum(trials.values()) / TRIALS_AT_ONCE_RESERVED
    return {"chain": chain, "ideal": ideal, "reserve_floor": floor, "critical_path": max(chain, ideal),
            "reserve_critical_path": max(chain, ideal, floor),
            "build_share": sum(builds.values()) / sum(chains.values())}


def peak_rss_16_cold(runtime, root: Path, emit) -> None:
    """16 tasks, each its own small Dockerfile, 16 at a time, cold, as `orchestra run` in its
    own process: its peak RSS with the build pool and without."""
    orchestra = str(Path(sys.executable).parent / "orchestra")
    for label, ahead in (("no_pool", ["--build-ahead", "0"]), ("pool", [])):
        remove_images(runtime)
        tasks = root / f"rss-{label}"
        nonce = uuid.uuid4().hex[:12]
        for i in range(16):
            task = tasks / f"{PREFIX}-rss-{i:02d}"
            for sub in ("environment", "tests", "solution"):
                (task / sub).mkdir(parents=True)
            (task / "instruction.md").write_text("Touch /app/ok.\n")
            (task / "task.toml").write_text("[agent]\ntimeout_sec = 60\n[environment]\ncpus = 0.1\nmemory_mb = 128\n")
            (task / "environment" / "Dockerfile").write_text(f"FROM {BASE}\nWORKDIR /app\nRUN echo {nonce}-{i} > /nonce\n")
            (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/ok\n")
            (task / "tests" / "test.sh").write_text(
                "#!/bin/bash\nmkdir -p /logs/verifier\n[ -f /app/ok ] && echo 1 > /logs/verifier/reward.txt "
                "|| echo 0 > /logs/verifier/reward.txt\n")
        proc = subprocess.Popen([orchestra, "run", "--path", str(tasks), "--agent", "oracle", "-n", "16",
                                 "--max-cpus", "16", "-q", "--jobs-dir", str(root / "jobs"),
                                 "--job-name", f"rss-{label}", *ahead],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        emit(f"dataset_peak_rss_mb_16_cold_{label}", round(usage.ru_maxrss / 1024, 1))
        emit(f"dataset_rss_16_cold_{label}_exit", os.waitstatus_to_exitcode(status))
    remove_images(runtime)


def dataset(emit, n: int = 6, harbor: bool = True) -> None:
    from orchestrator.runtime.docker import DockerRuntime

    runtime = DockerRuntime(max_pool_size=16)
    emit("dataset_tasks", n)
    with tempfile.TemporaryDirectory(prefix="bench-dataset-") as name:
        root = Path(name)
        walls: dict[str, float] = {}
        runs: dict[str, tuple[JobResult, list[TrialResult]]] = {}
        for config, admission, workers in CONFIGS:
            wall, job, trials = run(runtime, root, n, config, admission, workers)
            walls[config], runs[config] = wall, (job, trials)
            if config == "before":  # the same copy again, its images kept: each trial alone
                _, _, warm = run(runtime, root, n, "warm", "reserve", 0, tasks=root / "before" / "tasks")
            remove_images(runtime)
        path = critical_path(runs["before"][1], warm)
        for key in ("chain", "ideal", "reserve_floor", "critical_path", "reserve_critical_path"):
            emit(f"dataset_{key}_seconds", round(path[key], 1))
        emit("dataset_build_share", round(path["build_share"], 2))
        for config, wall in walls.items():
            job = runs[config][0]
            emit(f"dataset_{config}_wall_seconds", round(wall, 1))
            emit(f"dataset_{config}_vs_chain", round(wall / path["chain"], 2))
            emit(f"dataset_{config}_vs_ideal", round(wall / path["ideal"], 2))
            emit(f"dataset_{config}_images_built", job.images_built)
            emit(f"dataset_{config}_mean_reward", job.mean_reward)
        emit("dataset_vs_critical_path", round(walls["cpu-limit"] / path["critical_path"], 2))
        emit("dataset_reserve_vs_critical_path", round(walls["reserve"] / path["reserve_critical_path"], 2))
        peak_rss_16_cold(runtime, root, emit)
        if harbor:  # the same tasks side by side with Harbor: one round, cold then warm
            from harbor import side_by_side

            side_by_side(make_dataset(root / "harbor", n, uuid.uuid4().hex[:12]), emit, rounds=1)


if __name__ == "__main__":
    from orchestrator import log as logsetup

    logsetup.configure()
    dataset(lambda key, value: print(f"{key}={value}", flush=True),
            int(sys.argv[1]) if len(sys.argv) > 1 else 6)
