"""The 2,000-trial job (issue 30), run by `python bench/run.py scale` (about 30 minutes, so
not part of the default bench). Not a test: it prints `name=value` lines measured in this run.

The job: 250 generated quick tasks on 5 images (5 Dockerfiles), k = 8, 4 at a time, the
oracle agent; half the tasks' solutions solve them and half do nothing (what the nop agent
does), so the rewards are mixed 1 and 0. It runs as `orchestra run` in its own process, as a
nightly job would, and is watched from outside:

  scale_trials            trials graded in the job
  scale_seconds           its wall time
  scale_vs_floor          its seconds per trial over the docker-py floor's (shared mode by
                          hand, bench/run.py's) doing 200 of the same trials 4 at a time,
                          100 before the job and 100 after it (target <= 1.25)
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
  scale_left_behind       containers and networks of the job on the engine after it (target 0)

Then the same job again, killed (SIGKILL) when about half its trials are done, and resumed:

  scale_killed_at         trials done when it was killed
  scale_resume_load_seconds   reading the finished trials' results (`load_finished`, in process)
  scale_resume_start_seconds  `orchestra run --resume` from process start to its first trial
  scale_resume_reran      trials the resume ran (the planned minus those complete)
  scale_resume_same_counts    1 when the resumed job's counts and mean reward equal the
                          uninterrupted job's
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# BENCH_SCALE_TASKS and BENCH_SCALE_K make a smaller job (a smoke run of this file)
N_TASKS, K = int(os.environ.get("BENCH_SCALE_TASKS", 250)), int(os.environ.get("BENCH_SCALE_K", 8))
N_CONCURRENT, VARIANTS = 4, 5
FLOOR_TRIALS = min(100, N_TASKS * K // 2)  # before the job, and as many after
TOML = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\ncpus = 1\nmemory_mb = 512\n"


def make_tasks(root: Path, make_task) -> list[Path]:
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
    on_done: dict[int, object] = field(default_factory=dict)  # done -> callable, called once
    samples: list[Sample] = field(default_factory=list)
    progress: list[dict] = field(default_factory=list)
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

    def _sample(self, proc: subprocess.Popen) -> None:
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


def floor_seconds_per_trial(api, images: dict[int, str], tasks: list[Path], shared_floor) -> float:
    """FLOOR_TRIALS of the job's trials by hand (docker-py), N_CONCURRENT at a time."""
    started = time.perf_counter()
    with ThreadPoolExecutor(N_CONCURRENT) as pool:
        list(pool.map(lambda i: shared_floor(api, images[i % VARIANTS], tasks[i % N_TASKS]), range(FLOOR_TRIALS)))
    return (time.perf_counter() - started) / FLOOR_TRIALS


def timed_get(url: str) -> tuple[float, str]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        assert response.status == 200, url
        body = response.read().decode()
    return time.perf_counter() - started, body


def left_behind(api, job: str) -> int:
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


def scale(tmp: Path, runtime, api, emit, orchestra: str, make_task, shared_floor) -> None:
    from orchestrator.job.runner import JobOptions, load_finished
    from orchestrator.job.summary import summarize
    from orchestrator.models.manifest import default_manifest
    from orchestrator.models.result import JobResult, TrialResult
    from orchestrator.tasks.load import load_tasks
    from orchestrator.trial.images import ensure_task_images
    from orchestrator.util import write_json_atomic
    from orchestrator.view.server import ViewServer

    task_dirs = make_tasks(tmp / "scale", make_task)
    tasks = load_tasks(tmp / "scale")
    images = {v: ensure_task_images(runtime, tasks[v], "bench").agent_image for v in range(VARIANTS)}
    jobs = tmp / "scale-jobs"
    common = ["run", "--path", str(tmp / "scale"), "--agent", "oracle", "-k", str(K), "-n", str(N_CONCURRENT),
              "-q", "--progress-json", "--jobs-dir", str(jobs)]
    floor_before = floor_seconds_per_trial(api, images, task_dirs, shared_floor)

    viewer = ViewServer([jobs]).start()
    running: dict[str, object] = {}

    def look_while_running() -> None:
        seconds, body = timed_get(viewer.url + "job/scale")
        running["seconds"], running["body"] = seconds, body

    job = Watched([orchestra, *common, "--job-name", "scale"], on_done={N_TASKS * K // 2: look_while_running})
    assert job.run() == 0, "the scale job failed"
    floor_after = floor_seconds_per_trial(api, images, task_dirs, shared_floor)
    folder = jobs / "scale"
    result = JobResult.model_validate_json((folder / "result.json").read_text())
    n = result.n_trials
    emit("scale_trials", n)
    emit("scale_counts", json.dumps(result.counts, sort_keys=True).replace(" ", ""))
    emit("scale_mean_reward", result.mean_reward)
    emit("scale_seconds", round(job.last_progress_at - job.started, 1))
    floor = (floor_before + floor_after) / 2
    emit("scale_floor_seconds_per_trial", round(floor, 3))
    emit("scale_seconds_per_trial", round((job.last_progress_at - job.started) / n, 3))
    emit("scale_vs_floor", round((job.last_progress_at - job.started) / n / floor, 2))
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
    emit("scale_left_behind", left_behind(api, "scale"))

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

    pages = ["job/scale", "job/scale?failed=1&sort=reward", f"job/scale?page={-(-n // 100)}"]
    emit("scale_view_page_seconds", round(max(timed_get(viewer.url + p)[0] for p in pages), 3))
    trial_dir = next((folder / "trials").iterdir()).name
    emit("scale_view_trial_page_seconds", round(timed_get(viewer.url + f"job/scale/trial/{trial_dir}")[0], 3))
    shown = re.search(r"(\d+ of \d+) trial\(s\) finished", str(running.get("body", "")))
    emit("scale_view_running_shown", shown.group(1).replace(" ", "_") if shown else "none")
    emit("scale_view_running_page_seconds", round(float(running.get("seconds", -1)), 3))

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
    same = again.n_trials == n and again.counts == result.counts and again.mean_reward == result.mean_reward
    emit("scale_resume_same_counts", int(same))
    emit("scale_resume_left_behind", left_behind(api, "scale-killed"))
    viewer.stop()
