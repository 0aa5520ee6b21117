"""Benchmarks (DESIGN 7), printed as ratios measured in the same run. Not a test.

1. Orchestration overhead: one oracle trial of tasks/examples/hello-file through orchestra
   vs the docker-py floor for the same containers done by hand (agent container, exec,
   copy out, verifier container, copy out, remove). Target: <= 1.25x.
2. Warm cache: share of a second run's time spent in the image phase. Target: < 5%.
3. Concurrency: n sleeping trials vs one. Target: <= 1.3x.
"""

from __future__ import annotations

import io
import statistics
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_task  # noqa: E402

from orchestrator import log as logsetup  # noqa: E402
from orchestrator.archive import tar_directory, tar_files  # noqa: E402
from orchestrator.images import ensure_task_images  # noqa: E402
from orchestrator.job import JobOptions, run_job  # noqa: E402
from orchestrator.models.manifest import default_manifest  # noqa: E402
from orchestrator.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.tasks import load_task  # noqa: E402

REPEATS = 5


def raw_floor(runtime: DockerRuntime, image: str, task_dir: Path) -> float:
    api = runtime.api
    started = time.perf_counter()
    agent = api.create_container(image, ["sleep", "infinity"], host_config=api.create_host_config(
        init=True, mem_limit="512m", nano_cpus=10**9), working_dir="/app")["Id"]
    api.start(agent)
    api.put_archive(agent, "/", tar_directory(task_dir / "solution", "solution"))
    exec_id = api.exec_create(agent, ["bash", "/solution/solve.sh"])["Id"]
    api.exec_start(exec_id)
    api.kill(agent)
    snapshot = api.commit(agent, repository="bench/snap", tag=uuid.uuid4().hex[:8])["Id"]
    api.remove_container(agent, force=True)
    verifier = api.create_container(snapshot, ["bash", "/tests/test.sh"],
                                    host_config=api.create_host_config(network_mode="none"))["Id"]
    api.put_archive(verifier, "/", tar_directory(task_dir / "tests", "tests"))
    api.put_archive(verifier, "/", tar_files({}, dirs=["logs", "logs/verifier"]))
    api.start(verifier)
    api.wait(verifier)
    stream, _ = api.get_archive(verifier, "/logs/verifier")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        assert any(m.name.endswith("reward.txt") for m in tar)
    api.remove_container(verifier, force=True)
    api.remove_image(snapshot, force=True)
    return time.perf_counter() - started


def orchestra_trials(runtime: DockerRuntime, path: Path, n: int, k: int, jobs: Path):
    options = JobOptions(job_name=f"bench-{uuid.uuid4().hex[:8]}", jobs_dir=jobs, n_concurrent=n, k=k)
    started = time.perf_counter()
    job = run_job(runtime, [load_task(path)], default_manifest("oracle"), options)
    return time.perf_counter() - started, job


def main() -> None:
    logsetup.configure()
    runtime = DockerRuntime(max_pool_size=64)
    hello = ROOT / "tasks/examples/hello-file"
    images = ensure_task_images(runtime, load_task(hello), "bench")
    with tempfile.TemporaryDirectory() as tmp:
        jobs = Path(tmp) / "jobs"
        floor = [raw_floor(runtime, images.agent_image, hello) for _ in range(REPEATS)]
        ours = orchestra_trials(runtime, hello, 1, REPEATS, jobs)[0] / REPEATS
        f, o = statistics.median(floor), ours
        print(f"overhead: orchestra {o:.3f} s/trial, docker-py floor {f:.3f} s/trial, "
              f"ratio {o / f:.2f}x (target <= 1.25x)")

        seconds, job = orchestra_trials(runtime, hello, 1, 1, jobs)
        trial = next((jobs / job.job / "trials").glob("*/result.json"))
        from orchestrator.models.result import TrialResult
        timings = TrialResult.model_validate_json(trial.read_text()).timings
        print(f"warm cache: images built {job.images_built}, image phase {timings.build:.3f} s "
              f"of {seconds:.3f} s = {100 * timings.build / seconds:.1f}% (target < 5%)")
        print("phases (s): " + ", ".join(f"{k} {v:.3f}" for k, v in timings.model_dump().items()))

        sleeper = make_task(Path(tmp) / "ds", "sleeper", solve="sleep 5\ntouch /app/ok\n",
                            toml="[environment]\ncpus = 0.1\nmemory_mb = 128\nstorage_mb = 64\n")
        one, _ = orchestra_trials(runtime, sleeper, 1, 1, jobs)
        for n in (4, 8):
            many, job = orchestra_trials(runtime, sleeper, n, n, jobs)
            assert job.mean_reward == 1.0
            print(f"concurrency: {n} sleeping trials {many:.2f} s vs one {one:.2f} s, "
                  f"ratio {many / one:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
