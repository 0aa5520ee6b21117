"""The 2,000-trial job (issue 30), run by `python bench/run.py scale [RUNS]` (RUNS default 3).
Not a test: it prints `name=value` lines measured in this run.

The job: 250 generated quick tasks on 5 images (5 Dockerfiles), k = 8, 4 at a time, the
oracle agent; half the tasks' solutions solve them and half do nothing (what the nop agent
does), so the rewards are mixed 1 and 0. It runs as `orchestra run` in its own process, as a
nightly job would, and is watched from outside.

One figure from one job moved 1.03-1.34 between runs (issue 48), so the job runs RUNS times,
each a fresh job folder (scale-1, scale-2, ...), with floor samples between them:

  floor, job 1, floor, job 2, floor, ..., job RUNS, floor

A floor sample is FLOOR_TRIALS (200) of the same trials by hand (docker-py, shared mode:
bench/run.py's shared_floor), 4 at a time, timed in FLOOR_CHUNKS (4) chunks of one pool; its
seconds per trial is the median of its chunks' (see floor_sample). A job's ratio is its
seconds per trial over the mean of the two floor samples either side of it, so a job and its
floor share the engine's state of that quarter hour. Every job folder is kept (about 11 MB a
job; disk is no concern); job 1's is the one measured below.

  scale_vs_floor_runs     each job's ratio, in order
  scale_seconds_runs      each job's wall time (process start to its last trial)
  scale_floor_seconds_per_trial_runs  the floor each ratio used (the mean of its two samples)
  scale_floor_samples     every floor sample's seconds per trial, in order (RUNS + 1)
  scale_floor_chunks      every sample's chunks' seconds per trial (how much a chunk moved)
  scale_vs_floor          the MEDIAN of scale_vs_floor_runs (target <= 1.25, issue 48)
  scale_vs_floor_spread   max - min of scale_vs_floor_runs (how steady the figure is)
  scale_seconds / scale_seconds_per_trial / scale_floor_seconds_per_trial   the medians of
                          the runs' (each its own median, so they need not divide exactly)
  scale_rss_growth_mb_runs  each job's memory growth (below), in order

From job 1 (all but the last: the same job every run, so one is enough):

  scale_trials            trials graded in the job
  scale_counts / scale_mean_reward   its result's counts and mean reward
  scale_rss_mb_at_100 / scale_rss_mb_last / scale_rss_growth_mb   the orchestrator's resident
                          memory when its 100th trial finished and when its last did (target:
                          growth < 50); scale_rss_mb_at_exit after its summary and tables
  scale_threads_*, scale_fds_*   its threads and open files at the same two points, and the most
  scale_events_bytes_per_trial   events.jsonl over the trials
  scale_job_bytes_per_trial      the job folder over the trials
  scale_finish_seconds    from the last trial's end to the process's exit (drain, clean-up,
                          summary, result.json, tables)
  scale_result_write_seconds  summarizing the 2,000 results and writing result.json, alone
  scale_report_seconds    `orchestra report` on the job, whole process (target < 5)
  scale_view_page_seconds the viewer's job page on the job, the slowest of the plain page,
                          failed-only sorted by reward, and the last page (target < 0.5)
  scale_view_trial_page_seconds  one trial's page
  scale_view_running_*    the job page while the job ran (about half done): the trials it
                          showed and the time it took
  scale_left_behind       containers and networks of all RUNS jobs on the engine after them
                          (target 0)

Then (once; BENCH_SCALE_RESUME=0 skips it and prints scale_resume_skipped=1) the same job
again, killed (SIGKILL) when about half its trials are done, and resumed:

  scale_killed_at         trials done when it was killed
  scale_resume_load_seconds   reading the finished trials' results (`load_finished`, in process)
  scale_resume_start_seconds  `orchestra run --resume` from process start to its first trial
  scale_resume_reran      trials the resume ran (the planned minus those complete)
  scale_resume_same_counts    1 when the resumed job's counts and mean reward equal job 1's

Run time on the 2-core bench host: a job about 13-16 minutes (0.40-0.47 s a trial), a floor
sample about 75 s; so about 50 minutes for 3 jobs without the resume, about 65 with it.
BENCH_SCALE_TASKS and BENCH_SCALE_K make a smaller job (a smoke run of this file).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# BENCH_SCALE_TASKS and BENCH_SCALE_K make a smaller job (a smoke run of this file)
N_TASKS, K = int(os.environ.get("BENCH_SCALE_TASKS", 250)), int(os.environ.get("BENCH_SCALE_K", 8))
N_CONCURRENT, VARIANTS = 4, 5
FLOOR_TRIALS = min(200, N_TASKS * K // 2)  # per floor sample
FLOOR_CHUNKS = 4  # per floor sample, each at least N_CONCURRENT trials (so fewer in a small run)
RESUME = os.environ.get("BENCH_SCALE_RESUME", "1") != "0"
TOML = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\ncpus = 1\nmemory_mb = 512\n"

Emit = Callable[[str, object], None]
SharedFloor = Callable[[Any, str, Path], float]  # (docker-py APIClient, image, task dir) -> seconds


def make_tasks(root: Path, make_task: Callable[..., Path]) -> list[Path]:
    return [make_task(root, f"t{i:03d}", toml=TOML,
                      solve="touch /app/ok\n" if i % 2 == 0 else "true\n",
                      dockerfile=f"FROM python:3.12-slim-bookworm\nRUN echo {i % VARIANTS} > /variant\nWORKDIR /app\n")
            for i in range(N_TASKS)]


@dataclass
class Sample:
    done: int
    rss_mb: float
    threads: int
    fds: int


@dataclass
class Watched:
    """An `orchestra run --progress-json` in its own process: its progress lines as they come,
    and its memory, threads and open files sampled every half second."""

    argv: list[str]
    kill_at: int | None = None  # SIGKILL once this many trials are done
    on_done: dict[int, Callable[[], None]] = field(default_factory=dict)  # done -> called once
    samples: list[Sample] = field(default_factory=list)
    progress: list[dict[str, Any]] = field(default_factory=list)
    last_progress_at: float = 0.0
    started: float = 0.0
    ended: float = 0.0

    def run(self) -> int:
        self.started = time.time()
        proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sampler = threading.Thread(target=self._sample, args=(proc,), daemon=True)
        sampler.start()
        assert proc.stderr is not None
        for line in proc.stderr:
            if not line.startswith('{"done"'):
                continue
            self.progress.append(json.loads(line))
            self.last_progress_at = time.time()
            done = self.progress[-1]["done"]
            for at in [a for a in self.on_done if a <= done]:
                threading.Thread(target=self.on_done.pop(at), daemon=True).start()
            if self.kill_at is not None and done >= self.kill_at:
                proc.send_signal(signal.SIGKILL)
                break
        code = proc.wait()
        self.ended = time.time()
        sampler.join()
        return code

    def _sample(self, proc: subprocess.Popen[str]) -> None:
        while proc.poll() is None:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
                done = self.progress[-1]["done"] if self.progress else 0
                self.samples.append(Sample(done, int(fields["VmRSS"].split()[0]) / 1024,
                                           int(fields["Threads"]), fds))
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.5)

    def at(self, done: int) -> Sample:
        """The first sample taken once `done` trials were done (the last sample if none was)."""
        return next((s for s in self.samples if s.done >= done), self.samples[-1])

    def seconds(self) -> float:
        """Process start to its last trial (its exit after that is scale_finish_seconds)."""
        return self.last_progress_at - self.started


def chunk_sizes(trials: int) -> list[int]:
    """FLOOR_CHUNKS chunks as even as can be, each at least N_CONCURRENT trials (a window of
    fewer completions than there are slots measures a burst, not a rate), so a small run has
    fewer chunks: 10 trials make 2 chunks of 5, 200 make 4 of 50."""
    n = max(1, min(FLOOR_CHUNKS, trials // N_CONCURRENT))
    return [trials // n + (1 if i < trials % n else 0) for i in range(n)]


def floor_sample(api: Any, images: dict[int, str], tasks: list[Path], shared_floor: SharedFloor) -> list[float]:
    """FLOOR_TRIALS of the job's trials by hand (docker-py), N_CONCURRENT at a time, in one
    pool; returns each chunk's seconds per trial. A chunk is a window of that pool's
    completions (the first from the pool's start to its 50th trial's end, the next to its
    100th's, ...), not a pool of its own, so no chunk pays a pool's ramp-down, which the job
    pays once in 2,000 trials. The sample's figure is the median of its chunks: one slow
    chunk (the engine's own housekeeping, another process's burst) no longer moves the
    floor, and so no longer moves the ratio."""
    ends: list[float] = []

    def one(i: int) -> None:
        shared_floor(api, images[i % VARIANTS], tasks[i % N_TASKS])
        ends.append(time.perf_counter())  # list.append is atomic under the GIL

    started = time.perf_counter()
    with ThreadPoolExecutor(N_CONCURRENT) as pool:
        list(pool.map(one, range(FLOOR_TRIALS)))
    ends.sort()
    chunks, edge, done = [], started, 0
    for size in chunk_sizes(FLOOR_TRIALS):
        done += size
        chunks.append((ends[done - 1] - edge) / size)
        edge = ends[done - 1]
    return chunks


def timed_get(url: str) -> tuple[float, str]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        assert response.status == 200, url
        body = response.read().decode()
    return time.perf_counter() - started, body


def left_behind(api: Any, job: str) -> int:
    label = {"label": f"orchestra.job={job}"}
    return len(api.containers(all=True, filters=label)) + len(api.networks(filters=label))


def first_trial_event_after(events: Path, since: float) -> float:
    for line in events.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:  # the killed process's half-written last line
            continue
        if event.get("event") == "trial.phase":
            at = dt.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
            if at >= since:
                return at
    raise RuntimeError(f"no trial event after {since} in {events}")


def compact(values: list[Any]) -> str:
    """A list as one name=value token: [1.1,1.2] (no spaces, like scale_counts)."""
    return json.dumps(values, separators=(",", ":"))


def scale(tmp: Path, runtime: Any, api: Any, emit: Emit, orchestra: str, make_task: Callable[..., Path],
          shared_floor: SharedFloor, runs: int = 3) -> None:
    """floor, job 1, floor, ..., job `runs`, floor; then job 1's figures, the medians and the
    resume (module docstring)."""
    from orchestrator.models.result import JobResult
    from orchestrator.tasks.load import load_tasks
    from orchestrator.trial.images import ensure_task_images
    from orchestrator.view.server import ViewServer

    task_dirs = make_tasks(tmp / "scale", make_task)
    tasks = load_tasks(tmp / "scale")
    images = {v: ensure_task_images(runtime, tasks[v], "bench").agent_image for v in range(VARIANTS)}
    jobs = tmp / "scale-jobs"
    common = ["run", "--path", str(tmp / "scale"), "--agent", "oracle", "-k", str(K), "-n", str(N_CONCURRENT),
              "-q", "--progress-json", "--jobs-dir", str(jobs)]
    viewer = ViewServer([jobs]).start()
    try:
        running: dict[str, Any] = {}

        def look_while_running() -> None:
            seconds, body = timed_get(viewer.url + "job/scale-1")
            running["seconds"], running["body"] = seconds, body

        floors = [floor_sample(api, images, task_dirs, shared_floor)]
        watched: list[Watched] = []
        for r in range(1, runs + 1):
            job = Watched([orchestra, *common, "--job-name", f"scale-{r}"],
                          on_done={N_TASKS * K // 2: look_while_running} if r == 1 else {})
            assert job.run() == 0, f"the scale job scale-{r} failed"
            watched.append(job)
            floors.append(floor_sample(api, images, task_dirs, shared_floor))
            floor = (statistics.median(floors[-2]) + statistics.median(floors[-1])) / 2
            print(f"scale: job {r} of {runs}: {job.seconds():.1f} s, floor {floor:.3f} s a trial",
                  file=sys.stderr, flush=True)
            if r == 1:
                measure_job_1(tmp, jobs / "scale-1", job, running, viewer.url, orchestra, emit)

        trials = [JobResult.model_validate_json((jobs / f"scale-{r}" / "result.json").read_text()).n_trials
                  for r in range(1, runs + 1)]
        samples = [statistics.median(chunks) for chunks in floors]
        floor_runs = [(samples[r] + samples[r + 1]) / 2 for r in range(runs)]
        per_trial = [job.seconds() / n for job, n in zip(watched, trials, strict=True)]
        ratios = [spt / floor for spt, floor in zip(per_trial, floor_runs, strict=True)]
        emit("scale_vs_floor_runs", compact([round(x, 2) for x in ratios]))
        emit("scale_seconds_runs", compact([round(job.seconds(), 1) for job in watched]))
        emit("scale_floor_seconds_per_trial_runs", compact([round(x, 3) for x in floor_runs]))
        emit("scale_floor_samples", compact([round(x, 3) for x in samples]))
        emit("scale_floor_chunks", compact([[round(x, 3) for x in chunks] for chunks in floors]))
        emit("scale_rss_growth_mb_runs", compact([round(job.at(n).rss_mb - job.at(100).rss_mb, 1)
                                                  for job, n in zip(watched, trials, strict=True)]))
        emit("scale_seconds", round(statistics.median(job.seconds() for job in watched), 1))
        emit("scale_seconds_per_trial", round(statistics.median(per_trial), 3))
        emit("scale_floor_seconds_per_trial", round(statistics.median(floor_runs), 3))
        emit("scale_vs_floor", round(statistics.median(ratios), 2))
        emit("scale_vs_floor_spread", round(max(ratios) - min(ratios), 2))
        emit("scale_left_behind", sum(left_behind(api, f"scale-{r}") for r in range(1, runs + 1)))

        if RESUME:
            resume(jobs, common, tasks, orchestra, api, emit)
        else:
            emit("scale_resume_skipped", 1)
    finally:
        viewer.stop()


def measure_job_1(tmp: Path, folder: Path, job: Watched, running: dict[str, Any], viewer_url: str,
                  orchestra: str, emit: Emit) -> None:
    """Job 1's result, memory, threads, files and bytes, and the report, result.json and viewer
    on its folder (run between its floor sample and job 2: seconds, not minutes)."""
    from orchestrator.job.runner import JobOptions
    from orchestrator.job.summary import summarize
    from orchestrator.models.manifest import default_manifest
    from orchestrator.models.result import JobResult, TrialResult
    from orchestrator.util import write_json_atomic

    result = JobResult.model_validate_json((folder / "result.json").read_text())
    n = result.n_trials
    emit("scale_trials", n)
    emit("scale_counts", json.dumps(result.counts, sort_keys=True).replace(" ", ""))
    emit("scale_mean_reward", result.mean_reward)
    first, last = job.at(100), job.at(n)  # when its 100th and its last trial were done
    emit("scale_rss_mb_at_100", round(first.rss_mb, 1))
    emit("scale_rss_mb_last", round(last.rss_mb, 1))
    emit("scale_rss_growth_mb", round(last.rss_mb - first.rss_mb, 1))
    emit("scale_rss_mb_max", round(max(s.rss_mb for s in job.samples), 1))
    emit("scale_rss_mb_at_exit", round(job.samples[-1].rss_mb, 1))  # after the summary and tables
    emit("scale_threads_at_100", first.threads)
    emit("scale_threads_last", last.threads)
    emit("scale_threads_max", max(s.threads for s in job.samples))
    emit("scale_fds_at_100", first.fds)
    emit("scale_fds_last", last.fds)
    emit("scale_fds_max", max(s.fds for s in job.samples))
    emit("scale_events_bytes_per_trial", round((folder / "events.jsonl").stat().st_size / n))
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    emit("scale_job_bytes_per_trial", round(total / n))
    emit("scale_finish_seconds", round(job.ended - job.last_progress_at, 2))

    trials = [TrialResult.model_validate_json(p.read_text()) for p in (folder / "trials").glob("*/result.json")]
    started = time.perf_counter()
    summary = summarize(JobOptions(job_name="scale-rewrite", jobs_dir=tmp, k=K), default_manifest("oracle"),
                        "oracle", trials, 0, 0.0)
    write_json_atomic(tmp / "scale-rewrite.json", summary)
    emit("scale_result_write_seconds", round(time.perf_counter() - started, 3))

    started = time.perf_counter()
    subprocess.run([orchestra, "report", str(folder)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    emit("scale_report_seconds", round(time.perf_counter() - started, 2))

    name = folder.name
    pages = [f"job/{name}", f"job/{name}?failed=1&sort=reward", f"job/{name}?page={-(-n // 100)}"]
    emit("scale_view_page_seconds", round(max(timed_get(viewer_url + p)[0] for p in pages), 3))
    trial_dir = next((folder / "trials").iterdir()).name
    emit("scale_view_trial_page_seconds", round(timed_get(viewer_url + f"job/{name}/trial/{trial_dir}")[0], 3))
    shown = re.search(r"(\d+ of \d+) trial\(s\) finished", str(running.get("body", "")))
    emit("scale_view_running_shown", shown.group(1).replace(" ", "_") if shown else "none")
    emit("scale_view_running_page_seconds", round(float(running.get("seconds", -1)), 3))


def resume(jobs: Path, common: list[str], tasks: list[Any], orchestra: str, api: Any, emit: Emit) -> None:
    """Job 1 again as scale-killed, SIGKILLed at half its trials, then `orchestra run --resume`."""
    from orchestrator.job.runner import load_finished
    from orchestrator.models.result import JobResult

    result = JobResult.model_validate_json((jobs / "scale-1" / "result.json").read_text())
    killed = Watched([orchestra, *common, "--job-name", "scale-killed"], kill_at=N_TASKS * K // 2)
    killed.run()
    emit("scale_killed_at", killed.progress[-1]["done"])
    started = time.perf_counter()
    complete = load_finished(jobs / "scale-killed", tasks)
    emit("scale_resume_load_seconds", round(time.perf_counter() - started, 3))
    resumed = Watched([orchestra, "run", "--resume", str(jobs / "scale-killed"), "-q", "--progress-json"])
    assert resumed.run() == 0, "the resumed job failed"
    emit("scale_resume_start_seconds",
         round(first_trial_event_after(jobs / "scale-killed" / "events.jsonl", resumed.started) - resumed.started, 2))
    emit("scale_resume_complete_before", len(complete))
    emit("scale_resume_reran", len(resumed.progress))
    again = JobResult.model_validate_json((jobs / "scale-killed" / "result.json").read_text())
    same = (again.n_trials == result.n_trials and again.counts == result.counts
            and again.mean_reward == result.mean_reward)
    emit("scale_resume_same_counts", int(same))
    emit("scale_resume_left_behind", left_behind(api, "scale-killed"))
