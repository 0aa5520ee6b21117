"""Benchmarks (DESIGN 7): `name=value` lines, each a ratio or count measured in this run.
Not a test: these machines are noisy, so nothing here asserts a time.

  overhead_ratio        orchestra's per-trial wall time (k trials in one job, hello-file,
                        oracle) over the docker-py floor for the same containers by hand;
                        per verifier mode: _shared (Harbor's default: test.sh in the agent's
                        container), _snapshot (a verifier container from a commit) and
                        _separate (a clean verifier container given the agent's artifacts;
                        a hello-artifact task, since hello-file's test needs the agent's /app)
  start_ms_*            a container's start on no network, the default bridge and a
                        user-defined bridge (the floor's and every trial's)
  engine_calls_per_trial  engine API requests orchestra makes per trial (beside the floor's
                        and Harbor's 21-35 docker CLI calls)
  concurrency16_vs_floor  16 concurrent sleeping trials over the floor doing the same 16
                        trials' containers at once (target <= 1.25)
  warm_images_built     images built by a second run of the same tasks (target 0)
  warm_image_phase_pct  share of that run's time in the image phase (target < 5)
  concurrency_ratio_N   wall time of N concurrent sleeping trials over one (target <= 1.3)
  peak_rss_mb_16        orchestrator (orchestra run) peak RSS at N = 16 (target < 300)
  report_10k_seconds    aggregate + Markdown + HTML + JUnit for 10,000 synthetic trials
  report_10k_peak_mb    peak Python heap while doing it
  view_job_page_seconds / view_trial_page_seconds   `orchestra view` on a 10,000-trial job
  help_seconds          `orchestra --help`, whole process (target < 0.3)
  run_seconds_1_trial   `orchestra run` of one oracle trial of hello-file, whole process,
                        warm images (target <= 1.5 x floor_seconds_per_trial)
  run_vs_floor_1_trial  run_seconds_1_trial over the shared floor timed around those runs
  startup_seconds       process start to the first trial's first event (target <= 0.3);
                        help_seconds, run_seconds_1_trial and startup_* are measured as a
                        README install has it: orchestra from a bytecode-free copy of its
                        source (bench/startup.py), never compiled first; startup_bytecode
                        says how those processes got orchestra's bytecode
  overhead_ratio_gvisor per-trial wall time of the same one-trial jobs under runsc over
                        under runc, in this run (where runsc is registered)
  concurrency16_gvisor_vs_runc  the 16 concurrent sleeping trials under runsc over the
                        same 16 under runc
  startup_sdk_import_seconds  of that, importing docker-py (with requests and urllib3): a
                        Python that imports it over one that does not, medians of 5
  bystander_relay_p95_ratio  a relay client's p95 round trip beside a relay flood (the
                        hostile suite's relay-flood agent) over its p95 alone (target <= 2;
                        tests/hostile only holds it to 10x, a bound noise cannot flip)
  makespan_longest_first_ratio  a job of one 20 s trial and eight 2 s ones on 2 slots, the
                        long one last in folder order: its wall time started longest first
                        (durations from the first run, as --baseline gives them) over in
                        folder order (--order given); `python bench/run.py makespan` runs it alone
  resume_load_seconds_1000  `--resume` reading 1,000 finished trials' results (synthetic)
  dataset_*             a generated dataset of cpus = 2 tasks with real builds and separate
                        verifier images, cold, oracle, 2 at a time: wall time over its
                        critical path and over its ideal, before the build pool and under
                        each admission policy (bench/dataset.py; `python bench/run.py
                        dataset` runs it alone, not in the default run), then the same
                        tasks side by side with Harbor (harbor_vs_orchestra)
  harbor_*              `python bench/run.py harbor PATH [ROUNDS]`: any task folder run by
                        Harbor (a throwaway venv) and by orchestra, oracle, 2 at a time, cold
                        and warm, alternating (bench/harbor.py)
  bystander_model_p95_ratio  a model call's p95 through its trial's proxy beside another
                        trial's 16 keep-alive connections of small calls (test_round2's
                        model-flood agent) over its p95 alone (target <= 2; the test: 3x)
  proxy_added_ms_p50_* / proxy_ttfb_added_ms_p50_*  the model proxy's added latency per call
                        (per agent API, relayed and translated) and its time to the first
                        streamed byte, each against a direct call to the same scripted
                        upstream, as ms and ratios (target <= 1 ms and <= 5 ms; no Docker:
                        `python bench/proxy_latency.py`, not in the default run)
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import docker  # noqa: E402  (docker-py: the floor is measured with it)
from conftest import make_task  # noqa: E402

sys.path.insert(0, str(ROOT / "tests/hostile"))
from kit import model_endpoint  # noqa: E402
from startup import bytecode_note, readme_install  # noqa: E402  (bench/, beside this file)
from test_integrity import BYSTANDER, RELAY, RELAY_FLOOD  # noqa: E402  (the same agents)
from test_round2 import MODEL_BYSTANDER, MODEL_FLOOD, SMALL  # noqa: E402

from orchestrator import log as logsetup  # noqa: E402
from orchestrator.archive import tar_directory, tar_files  # noqa: E402
from orchestrator.job.runner import JobOptions, run_job, summarize  # noqa: E402
from orchestrator.models.manifest import Manifest, default_manifest  # noqa: E402
from orchestrator.models.result import FailureMode, TrialResult  # noqa: E402
from orchestrator.report.junit import write_junit  # noqa: E402
from orchestrator.report.render import to_html, to_markdown  # noqa: E402
from orchestrator.report.tables import tables  # noqa: E402
from orchestrator.runtime.docker import DockerRuntime  # noqa: E402
from orchestrator.tasks.load import load_task  # noqa: E402
from orchestrator.trial.images import ensure_task_images  # noqa: E402

REPEATS = 5
ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


def emit(name: str, value) -> None:
    print(f"{name}={value}", flush=True)


class CallCounter:
    """Counts the floor's engine API requests (a response hook on docker-py's session)."""

    def __init__(self, api):
        self.count, self._lock = 0, threading.Lock()
        api.hooks["response"].append(self)

    def __call__(self, response, *args, **kwargs):
        with self._lock:
            self.count += 1


# The floor's containers are on a user-defined bridge network, as a trial's are (orchestra's
# come from a pool; this one is made once, outside any timing): a container starts about
# 0.1 s slower on one than on none or the default bridge (network_start_ms), a cost of the
# trial's network isolation, not of orchestration. Until 2026-12-04 the floor's agent was on
# the default bridge and its verifier on none.
FLOOR_NETWORK = "orchestra-bench-floor"


def network_start_ms(api, image: str) -> dict[str, float]:
    """Median container start on each kind of network, milliseconds."""
    out = {}
    for mode in ("none", "bridge", FLOOR_NETWORK):
        times = []
        for _ in range(REPEATS):
            container = api.create_container(image, ["true"], host_config=api.create_host_config(
                network_mode=mode))["Id"]
            started = time.perf_counter()
            api.start(container)
            times.append(time.perf_counter() - started)
            api.wait(container)
            api.remove_container(container, force=True)
        out[mode] = round(statistics.median(times) * 1000, 1)
    return out


def solved_agent(api, image: str, task_dir: Path) -> str:
    """The floor's agent: a started container that has run solution/solve.sh."""
    agent = api.create_container(image, ["sleep", "infinity"], working_dir="/app", host_config=api.create_host_config(
        init=True, mem_limit="512m", nano_cpus=10**9, network_mode=FLOOR_NETWORK))["Id"]
    api.start(agent)
    api.put_archive(agent, "/", tar_directory(task_dir / "solution", "solution"))
    api.exec_start(api.exec_create(agent, ["bash", "/solution/solve.sh"])["Id"])
    return agent


def shared_floor(api, image: str, task_dir: Path) -> float:
    """Shared mode by hand (docker-py): agent container, exec solve, then test.sh in it."""
    started = time.perf_counter()
    agent = solved_agent(api, image, task_dir)
    api.put_archive(agent, "/", tar_directory(task_dir / "tests", "tests"))
    api.put_archive(agent, "/", tar_files({}, dirs=["logs", "logs/verifier"]))
    api.exec_start(api.exec_create(agent, ["bash", "/tests/test.sh"])["Id"])
    stream, _ = api.get_archive(agent, "/logs/verifier")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        assert any(m.name.endswith("reward.txt") for m in tar)
    api.remove_container(agent, force=True)
    return time.perf_counter() - started


def raw_floor(api, image: str, task_dir: Path) -> float:
    """Snapshot mode by hand (docker-py): agent container, exec, commit, verifier container,
    copy out."""
    started = time.perf_counter()
    agent = solved_agent(api, image, task_dir)
    api.kill(agent)
    snapshot = api.commit(agent, repository="bench/snap", tag=uuid.uuid4().hex[:8])["Id"]
    api.remove_container(agent, force=True)
    verifier = api.create_container(snapshot, ["bash", "/tests/test.sh"],
                                    host_config=api.create_host_config(network_mode=FLOOR_NETWORK))["Id"]
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


def separate_floor(api, agent_image: str, task_image: str, task_dir: Path) -> float:
    """Separate mode by hand (docker-py): agent container, exec solve, copy its artifacts
    out, remove it; a verifier container from the clean task image given tests, artifacts
    and log folders; wait, copy the verdict out."""
    started = time.perf_counter()
    agent = solved_agent(api, agent_image, task_dir)
    stream, _ = api.get_archive(agent, "/logs/artifacts")
    artifacts = b"".join(stream)
    api.remove_container(agent, force=True)
    verifier = api.create_container(task_image, ["bash", "/tests/test.sh"],
                                    host_config=api.create_host_config(network_mode=FLOOR_NETWORK))["Id"]
    api.put_archive(verifier, "/", tar_directory(task_dir / "tests", "tests"))
    api.put_archive(verifier, "/", tar_files({}, dirs=["logs", "logs/verifier"]))
    api.put_archive(verifier, "/logs", artifacts)
    api.start(verifier)
    api.wait(verifier)
    stream, _ = api.get_archive(verifier, "/logs/verifier")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        reward = next(tar.extractfile(m).read() for m in tar if m.name.endswith("reward.txt"))
    assert reward.strip() == b"1", reward
    api.remove_container(verifier, force=True)
    return time.perf_counter() - started


HELLO_ARTIFACT_SOLVE = "mkdir -p /logs/artifacts\necho hello > /logs/artifacts/hello.txt\n"
HELLO_ARTIFACT_TEST = ("mkdir -p /logs/verifier\n"
                       "if grep -qx hello /logs/artifacts/hello.txt; then echo 1; else echo 0; fi"
                       " > /logs/verifier/reward.txt\n")


def bracketed(floor, measure):
    """(median floor, measure()): the floor is timed REPEATS times before and REPEATS times
    after the measurement, so a machine whose speed drifts during the run (ours do, by 10-30%
    within a minute) biases neither side of the ratio."""
    before = [floor() for _ in range(REPEATS)]
    value = measure()
    after = [floor() for _ in range(REPEATS)]
    return statistics.median(before + after), value


def job_seconds(runtime, path: Path, n: int, k: int, jobs: Path, oci_runtime: str | None = None):
    options = JobOptions(job_name=f"bench-{uuid.uuid4().hex[:8]}", jobs_dir=jobs, n_concurrent=n, k=k,
                         oci_runtime=oci_runtime)
    started = time.perf_counter()
    job = run_job(runtime, [load_task(path)], default_manifest("oracle"), options)
    return time.perf_counter() - started, job


def with_mode(task_dir: Path, mode: str, root: Path) -> Path:
    target = root / "modes" / f"{task_dir.name}-{mode}"
    shutil.copytree(task_dir, target, dirs_exist_ok=True)
    toml = (target / "task.toml").read_text().replace("[verifier]\n", f"[verifier]\nenvironment_mode = \"{mode}\"\n")
    (target / "task.toml").write_text(toml)
    return target


def whole_process(hello: Path, jobs: Path, env: dict[str, str]) -> tuple[float, float]:
    """One `orchestra run` of one oracle trial: its wall time, and the time from process
    start to the first trial's first event (events.jsonl, microsecond timestamps)."""
    name = f"one-{uuid.uuid4().hex[:8]}"
    started = time.time()
    subprocess.run([ORCHESTRA, "run", "--path", str(hello), "--agent", "oracle", "-q",
                    "--jobs-dir", str(jobs), "--job-name", name], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.time() - started
    for line in (jobs / name / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "trial.phase":
            first = dt.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
            return wall, first - started
    raise RuntimeError("no trial event")


def bystander_ratio(runtime, jobs: Path, name: str, tasks: list, manifest, endpoints=None) -> None:
    """A bystander's p95 (its latency.json) with a flood beside it, over the same alone; each
    measured twice, alternating, and the medians taken (the machine drifts)."""
    for task in tasks:
        ensure_task_images(runtime, task, "bench")

    def p95(with_flood: bool) -> float:
        options = JobOptions(job_name=f"bench-{name}-{uuid.uuid4().hex[:8]}", jobs_dir=jobs,
                             n_concurrent=2, endpoints=endpoints)
        job = run_job(runtime, tasks if with_flood else tasks[:1], manifest, options)
        for result in (jobs / job.job / "trials").glob("bystander*/artifacts/latency.json"):
            return json.loads(result.read_text())["p95"]
        raise RuntimeError(f"bench: the bystander wrote no latency.json in {job.job}")

    quiet, loud = [], []
    for _ in range(2):
        quiet.append(p95(False))
        loud.append(p95(True))
    emit(f"bystander_{name}_p95_quiet_s", round(statistics.median(quiet), 4))
    emit(f"bystander_{name}_p95_flood_s", round(statistics.median(loud), 4))
    emit(f"bystander_{name}_p95_ratio", round(statistics.median(loud) / statistics.median(quiet), 2))


def relay_p95_ratio(runtime, tmp: Path, jobs: Path) -> None:
    """The relay bystander beside the hostile suite's relay flood."""
    bystander = make_task(tmp / "relay", "bystander", toml=RELAY, solve=BYSTANDER)
    flood = make_task(tmp / "relay", "relay-flood", toml=RELAY, solve=RELAY_FLOOD)
    bystander_ratio(runtime, jobs, "relay", [load_task(bystander), load_task(flood)], default_manifest("oracle"))


def model_p95_ratio(runtime, tmp: Path, jobs: Path) -> None:
    """The model bystander beside round 2's model-call flood, through an endpoint in its
    own process."""
    bystander = make_task(tmp / "model", "bystander-model", toml=SMALL, solve=MODEL_BYSTANDER)
    flood = make_task(tmp / "model", "model-flood", toml=SMALL, solve=MODEL_FLOOD)
    manifest = Manifest.model_validate({"condition": "bench-model", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "oracle", "endpoint": "upstream"}]})
    with model_endpoint() as endpoints:
        bystander_ratio(runtime, jobs, "model", [load_task(bystander), load_task(flood)], manifest, endpoints)


def makespan(runtime, tmp: Path, jobs: Path) -> None:
    """Longest first against folder order on a job with skewed durations (job/durations.py)."""
    from orchestrator.job.durations import measured
    from orchestrator.tasks.load import load_tasks

    toml = "[agent]\ntimeout_sec = 120\n[environment]\ncpus = 0.25\nmemory_mb = 256\n"
    for i in range(8):
        make_task(tmp / "skew", f"a-short-{i}", solve="sleep 2\ntouch /app/ok\n", toml=toml)
    make_task(tmp / "skew", "z-long", solve="sleep 20\ntouch /app/ok\n", toml=toml)
    tasks = load_tasks(tmp / "skew")
    for task in tasks[:1]:
        ensure_task_images(runtime, task, "bench")  # one image for all: the same Dockerfile

    def wall(**order) -> tuple[float, list[TrialResult]]:
        options = JobOptions(job_name=f"bench-skew-{uuid.uuid4().hex[:8]}", jobs_dir=jobs, n_concurrent=2,
                             **order)
        started = time.perf_counter()
        job = run_job(runtime, tasks, default_manifest("oracle"), options)
        assert job.mean_reward == 1.0, job.counts
        trials = [TrialResult.model_validate_json(p.read_text())
                  for p in (jobs / job.job / "trials").glob("*/result.json")]
        return time.perf_counter() - started, trials

    given, trials = wall(longest_first=False)
    known = measured(trials)
    first, _ = wall(durations=known)
    emit("makespan_given_seconds", round(given, 1))
    emit("makespan_longest_first_seconds", round(first, 1))
    emit("makespan_longest_first_ratio", round(first / given, 2))


def sdk_import_seconds(env: dict[str, str]) -> float:
    def timed(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        return time.perf_counter() - started

    # as orchestra imports it: through the engine client, which keeps paramiko (installed for
    # ssh://) out of docker-py's import when the engine cannot be ssh
    bare = statistics.median(timed("import orchestrator.runtime") for _ in range(5))
    return statistics.median(timed("import orchestrator.runtime.client") for _ in range(5)) - bare


def help_seconds(env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([ORCHESTRA, "--help"], check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started


def synthetic_trials(job: str, n: int = 10_000) -> list[TrialResult]:
    """n trials of 500 tasks: a third pass, every seventh timed out, two layers."""
    template = TrialResult(trial_id="x", job=job, task="ds/t", task_path="/t", content_hash="h",
                           condition="c", condition_hash="h", agent="oracle", attempt=0)
    trials = []
    for i in range(n):
        t = template.model_copy(deep=True)
        t.trial_id, t.task, t.attempt = f"{i:064x}", f"ds/task-{i % 500:03d}", i // 500
        t.reward = {"reward": float(i % 3 == 0)}
        t.failure_mode = FailureMode.NONE if i % 7 else FailureMode.AGENT_TIMEOUT
        t.layer, t.scenario_class = ("regression", "exact") if i % 2 else ("workflow", "stale")
        t.started_at, t.finished_at = 0.0, 1.0
        trials.append(t)
    return trials


def resume_load(tmp: Path, n: int = 1000) -> None:
    """`--resume` of a job killed with n trials done: the time to read what is finished."""
    from orchestrator.job.runner import load_finished
    from orchestrator.util import write_json_atomic

    job_dir = tmp / "resume-job"
    for t in synthetic_trials("resume-job", n):
        write_json_atomic(job_dir / "trials" / f"t{t.trial_id[-12:]}" / "result.json", t)
    started = time.perf_counter()
    finished = load_finished(job_dir, [])
    assert len(finished) == n
    emit(f"resume_load_seconds_{n}", round(time.perf_counter() - started, 3))


def report_10k(tmp: Path) -> None:
    trials = synthetic_trials("synthetic")
    tracemalloc.start()
    started = time.perf_counter()
    from orchestrator.job.runner import JobOptions as Options
    job = summarize(Options(job_name="synthetic", jobs_dir=tmp, k=20), default_manifest("oracle"), "oracle",
                    trials, 0, 0.0)
    aggregate = tables(trials)
    to_markdown(job, aggregate)
    to_html(job, aggregate)
    write_junit("synthetic", tmp, trials, tmp / "junit.xml")
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    emit("report_10k_seconds", round(seconds, 2))
    emit("report_10k_peak_mb", round(peak / 2**20, 1))


def viewer_10k(tmp: Path) -> None:
    """`orchestra view` on a synthetic job of 10,000 trials: one job page, one trial page."""
    import urllib.request

    from orchestrator.job.runner import JobOptions as Options
    from orchestrator.util import write_json_atomic
    from orchestrator.view.server import ViewServer

    trials = synthetic_trials("view10k")
    folder = tmp / "views" / "view10k"
    job = summarize(Options(job_name="view10k", jobs_dir=tmp / "views", k=20), default_manifest("oracle"),
                    "oracle", trials, 0, 0.0)
    write_json_atomic(folder / "result.json", job)
    one = folder / "trials" / f"task-000__{trials[0].trial_id[:12]}"
    write_json_atomic(one / "result.json", trials[0])
    (one / "agent").mkdir()
    (one / "agent/trajectory.jsonl").write_text("".join(
        '{"seq": %d, "event": {"kind": "text", "text": "step %d"}}\n' % (n, n) for n in range(2000)))
    server = ViewServer([tmp / "views"]).start()
    try:
        for name, path in (("view_job_page_seconds", "job/view10k?failed=1&sort=reward"),
                           ("view_trial_page_seconds", f"job/view10k/trial/{one.name}")):
            started = time.perf_counter()
            with urllib.request.urlopen(server.url + path, timeout=60) as response:
                assert response.status == 200
                response.read()
            emit(name, round(time.perf_counter() - started, 3))
    finally:
        server.stop()


def main() -> None:
    logsetup.configure()
    runtime = DockerRuntime(max_pool_size=64)
    floor_api = docker.from_env(max_pool_size=64, timeout=120).api
    hello = ROOT / "tasks/examples/hello-file"
    images = ensure_task_images(runtime, load_task(hello), "bench")
    if not floor_api.networks(names=[FLOOR_NETWORK]):
        floor_api.create_network(FLOOR_NETWORK, driver="bridge")
    starts = network_start_ms(floor_api, images.agent_image)
    emit("start_ms_network_none", starts["none"])
    emit("start_ms_default_bridge", starts["bridge"])
    emit("start_ms_user_bridge", starts[FLOOR_NETWORK])
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        jobs = tmp / "jobs"
        counter = CallCounter(floor_api)
        before = counter.count
        shared_floor(floor_api, images.agent_image, hello)
        emit("floor_engine_calls_per_trial", counter.count - before)
        before = runtime.api.calls
        job_seconds(runtime, hello, 1, REPEATS, jobs)
        emit("engine_calls_per_trial", round((runtime.api.calls - before) / REPEATS, 1))
        floor, ours = bracketed(lambda: shared_floor(floor_api, images.agent_image, hello),
                                lambda: job_seconds(runtime, hello, 1, REPEATS, jobs)[0] / REPEATS)
        emit("harbor_cli_calls_per_trial", "21-35")
        emit("floor_seconds_per_trial", round(floor, 3))
        emit("orchestra_seconds_per_trial", round(ours, 3))
        emit("overhead_ratio", round(ours / floor, 2))
        emit("overhead_ratio_shared", round(ours / floor, 2))
        snapshot = with_mode(hello, "snapshot", tmp)
        ensure_task_images(runtime, load_task(snapshot), "bench")
        job_seconds(runtime, snapshot, 1, 1, jobs)  # warm
        snap_floor, snap = bracketed(lambda: raw_floor(floor_api, images.agent_image, hello),
                                     lambda: job_seconds(runtime, snapshot, 1, REPEATS, jobs)[0] / REPEATS)
        emit("floor_seconds_per_trial_snapshot", round(snap_floor, 3))
        emit("overhead_ratio_snapshot", round(snap / snap_floor, 2))
        separate = make_task(tmp / "ds", "hello-artifact", solve=HELLO_ARTIFACT_SOLVE,
                             test=HELLO_ARTIFACT_TEST,
                             toml="[agent]\ntimeout_sec = 60\n[verifier]\nenvironment_mode = \"separate\"\n")
        separate_images = ensure_task_images(runtime, load_task(separate), "bench")
        _, job = job_seconds(runtime, separate, 1, 1, jobs)  # warm, and it passes
        assert job.mean_reward == 1.0, job.counts
        sep_floor, sep = bracketed(
            lambda: separate_floor(floor_api, separate_images.agent_image, separate_images.task_image,
                                   separate),
            lambda: job_seconds(runtime, separate, 1, REPEATS, jobs)[0] / REPEATS)
        emit("floor_seconds_per_trial_separate", round(sep_floor, 3))
        emit("overhead_ratio_separate", round(sep / sep_floor, 2))
        if "runsc" in runtime.engine_facts().oci_runtimes:
            gvisor = statistics.median(job_seconds(runtime, hello, 1, 1, jobs, oci_runtime="runsc")[0]
                                       for _ in range(REPEATS))
            runc = statistics.median(job_seconds(runtime, hello, 1, 1, jobs)[0] for _ in range(REPEATS))
            emit("gvisor_seconds_per_trial", round(gvisor, 3))
            emit("overhead_ratio_gvisor", round(gvisor / runc, 2))
        installed = readme_install(tmp)  # start-up as a README install has it (bench/startup.py)
        emit("startup_bytecode", bytecode_note(installed))
        emit("help_seconds", round(statistics.median(help_seconds(installed) for _ in range(REPEATS)), 3))
        run_floor, runs = bracketed(lambda: shared_floor(floor_api, images.agent_image, hello),
                                    lambda: [whole_process(hello, jobs, installed) for _ in range(REPEATS)])
        one_run = statistics.median(r[0] for r in runs)
        emit("run_seconds_1_trial", round(one_run, 3))
        emit("floor_seconds_per_trial_for_run", round(run_floor, 3))
        emit("run_vs_floor_1_trial", round(one_run / run_floor, 2))
        emit("startup_seconds", round(statistics.median(r[1] for r in runs), 3))
        emit("startup_sdk_import_seconds", round(sdk_import_seconds(installed), 3))

        seconds, job = job_seconds(runtime, hello, 1, 1, jobs)
        trial = TrialResult.model_validate_json(next((jobs / job.job / "trials").glob("*/result.json")).read_text())
        emit("warm_images_built", job.images_built)
        emit("warm_image_phase_pct", round(100 * trial.timings.build / seconds, 2))

        sleeper = make_task(tmp / "ds", "sleeper", solve="sleep 5\ntouch /app/ok\n",
                            toml="[environment]\ncpus = 0.1\nmemory_mb = 128\nstorage_mb = 64\n")
        job_seconds(runtime, sleeper, 1, 1, jobs)  # build once
        one = job_seconds(runtime, sleeper, 1, 1, jobs)[0]
        emit("concurrency_one_seconds", round(one, 2))
        for n in (4, 16):
            many, job = job_seconds(runtime, sleeper, n, n, jobs)
            assert job.mean_reward == 1.0, job.counts
            emit(f"concurrency_ratio_{n}", round(many / one, 2))
        sleeper_image = ensure_task_images(runtime, load_task(sleeper), "bench").agent_image
        started = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda _: shared_floor(floor_api, sleeper_image, sleeper), range(16)))
        floor16 = time.perf_counter() - started
        emit("floor_seconds_16", round(floor16, 2))
        emit("concurrency16_vs_floor", round(many / floor16, 2))
        if "runsc" in runtime.engine_facts().oci_runtimes:  # the same 16 at once under gVisor
            many_gvisor, job = job_seconds(runtime, sleeper, 16, 16, jobs, oci_runtime="runsc")
            assert job.mean_reward == 1.0, job.counts
            emit("concurrency16_gvisor_seconds", round(many_gvisor, 2))
            emit("concurrency16_gvisor_vs_runc", round(many_gvisor / many, 2))
        proc = subprocess.Popen([ORCHESTRA, "run", "--path", str(sleeper), "--agent", "oracle", "-k", "16",
                                 "-n", "16", "-q", "--jobs-dir", str(jobs), "--job-name", "rss16"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        emit("peak_rss_mb_16", round(usage.ru_maxrss / 1024, 1))
        relay_p95_ratio(runtime, tmp, jobs)
        model_p95_ratio(runtime, tmp, jobs)
        makespan(runtime, tmp, jobs)
        resume_load(tmp)
        report_10k(tmp)
        viewer_10k(tmp)
    floor_api.remove_network(FLOOR_NETWORK)
    emit("bench_rss_mb", round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))


if __name__ == "__main__":
    if sys.argv[1:] == ["resume"]:
        with tempfile.TemporaryDirectory() as name:
            resume_load(Path(name))
    elif sys.argv[1:2] == ["scale"]:  # the 2,000-trial job RUNS times (bench/scale.py): about 50 min
        from scale import scale  # for 3 runs; 65 with the kill and resume (BENCH_SCALE_RESUME=0)

        runs = sys.argv[2] if len(sys.argv) == 3 else "3"
        if len(sys.argv) > 3 or not runs.isdigit() or int(runs) < 1:
            raise SystemExit("usage: python bench/run.py scale [RUNS]  (RUNS >= 1, default 3)")
        logsetup.configure()
        api = docker.from_env(timeout=120).api
        if not api.networks(names=[FLOOR_NETWORK]):
            api.create_network(FLOOR_NETWORK, driver="bridge")
        with tempfile.TemporaryDirectory() as name:
            scale(Path(name), DockerRuntime(max_pool_size=16), api, emit, ORCHESTRA, make_task, shared_floor,
                  int(runs))
        api.remove_network(FLOOR_NETWORK)
    elif sys.argv[1:2] == ["dataset"]:  # the dataset benchmark (bench/dataset.py): a few minutes
        from dataset import dataset

        logsetup.configure()
        dataset(emit, int(sys.argv[2]) if len(sys.argv) > 2 else 6)
    elif sys.argv[1:2] == ["harbor"]:  # side by side with Harbor on a task folder (bench/harbor.py)
        from harbor import side_by_side

        logsetup.configure()
        if len(sys.argv) < 3:
            raise SystemExit("usage: python bench/run.py harbor PATH [ROUNDS]")
        side_by_side(Path(sys.argv[2]).resolve(), emit, int(sys.argv[3]) if len(sys.argv) > 3 else 2)
    elif sys.argv[1:] == ["makespan"]:
        logsetup.configure()
        with tempfile.TemporaryDirectory() as name:
            makespan(DockerRuntime(max_pool_size=16), Path(name), Path(name) / "jobs")
    else:
        main()
