"""Many trials: concurrency, k attempts, the disk watchdog, clean-up, the job result.

Data flows one way: cli -> job -> trial -> runtime; results come back as pydantic objects
and are written once, atomically.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import structlog

from orchestrator.agents import agent_for
from orchestrator.errors import InputError
from orchestrator.images import TaskImages, ensure_task_images
from orchestrator.models.manifest import Manifest
from orchestrator.models.result import ERRORED, FailureMode, JobResult, TrialResult, TrialSummary
from orchestrator.proxy import Upstreams
from orchestrator.runtime import disk
from orchestrator.runtime.base import LABEL_JOB
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.sandbox import NetworkPool
from orchestrator.tasks import Task
from orchestrator.trial import TrialContext, run_trial
from orchestrator.util import write_json_atomic

log = structlog.get_logger()


@dataclass
class JobOptions:
    job_name: str
    jobs_dir: Path
    n_concurrent: int = 4
    k: int = 1
    policy: str = "memory-on"
    manifest_dir: Path | None = None
    endpoints: object = None  # models.endpoint.EndpointConfig


class DiskWatchdog:
    """One thread per job polls the writable-layer size of the job's running containers
    (one API call for all of them) and kills any container past its storage quota."""

    def __init__(self, runtime: DockerRuntime, job: str, interval: float = 1.0):
        self.runtime, self.job, self.interval = runtime, job, interval
        self._limits: dict[str, int] = {}
        self._tripped: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="disk-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def register(self, container: str, storage_mb: int) -> None:
        with self._lock:
            self._limits[container] = storage_mb * 1024 * 1024

    def unregister(self, container: str) -> None:
        with self._lock:
            self._limits.pop(container, None)

    def tripped(self, container: str) -> bool:
        with self._lock:
            return container in self._tripped

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                if not self._limits:
                    continue
            try:
                sizes = self.runtime.writable_layer_bytes(self.job)
            except Exception as exc:
                log.warning("watchdog.poll_failed", error=str(exc))
                continue
            for container, size in sizes.items():
                with self._lock:
                    limit = self._limits.get(container)
                    over = limit is not None and size > limit and container not in self._tripped
                    if over:
                        self._tripped.add(container)
                if over:
                    log.warning("watchdog.disk_limit", container=container[:12], bytes=size,
                                limit=limit)
                    self.runtime.kill(container)


class ImageCache:
    """Task images per job: built at most once, one builder per image."""

    def __init__(self, runtime: DockerRuntime, job: str, install: str | None = None):
        self.runtime, self.job, self.install = runtime, job, install
        self._done: dict[str, TaskImages] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.built = 0

    def __call__(self, task: Task) -> TaskImages:
        with self._guard:
            lock = self._locks.setdefault(task.name, threading.Lock())
        with lock:
            if task.name not in self._done:
                images = ensure_task_images(self.runtime, task, self.job, self.install)
                with self._guard:
                    self.built += images.built
                self._done[task.name] = images
            return self._done[task.name]


def preflight(tasks: list[Task], manifest: Manifest, endpoints=None) -> set[str]:
    """Refuse, before any container starts, what cannot run. Returns the endpoints in use."""
    problems = []
    lead = manifest.orchestrator
    in_use = {m.endpoint for m in manifest.roster if m.endpoint}
    if lead.agent == "reference" and not lead.endpoint:
        problems.append(f"roster.{lead.id}.endpoint: required for agent: reference")
    if in_use and endpoints is None:
        problems.append("the manifest names endpoints but no endpoint config was given (--endpoints)")
    for name in sorted(in_use) if endpoints is not None else []:
        try:
            endpoints.resolve(name)
        except InputError as exc:
            problems.extend(exc.problems)
    if lead.agent == "oracle":
        problems += [f"{t.path / 'solution/solve.sh'}: missing (the oracle agent needs it)"
                     for t in tasks if not t.has_solution]
    if problems:
        raise InputError(problems)
    return in_use


def reap(runtime: DockerRuntime, label: str) -> dict[str, int]:
    """Remove containers, volumes, networks (and their loop disks) carrying a label."""
    containers, networks, volumes = runtime.labelled(label)
    for container in containers:
        runtime.remove(container)
    for volume in volumes:
        runtime.remove_volume(volume)
    job = label.partition("=")[2] or None
    disks = disk.reap_loop_disks(job)
    for network in networks:
        runtime.remove_network(network)
    return {"containers": len(containers), "networks": len(networks), "volumes": len(volumes),
            "disks": disks}


def run_job(runtime: DockerRuntime, tasks: list[Task], manifest: Manifest,
            options: JobOptions, on_trial_done=None) -> JobResult:
    in_use = preflight(tasks, manifest, options.endpoints)
    lead = manifest.orchestrator
    agent = agent_for(lead, options.manifest_dir)  # re-hashes the prompt before any spend
    upstreams = Upstreams.open(in_use, options.endpoints) if in_use else None  # keys: exit 2
    job_dir = options.jobs_dir / options.job_name
    write_json_atomic(job_dir / "config.json", {
        "job": options.job_name, "manifest": manifest.model_dump(mode="json"),
        "condition_hash": manifest.condition_hash(), "k": options.k,
        "n_concurrent": options.n_concurrent, "policy": options.policy,
        "tasks": [{"name": t.name, "path": str(t.path), "content_hash": t.content_hash}
                  for t in tasks],
    })
    cancel = threading.Event()
    images = ImageCache(runtime, options.job_name, lead.install if lead.agent == "command" else None)
    watchdog = DiskWatchdog(runtime, options.job_name)
    networks = NetworkPool(runtime, options.job_name)
    ctx = TrialContext(
        runtime=runtime, job=options.job_name, job_dir=job_dir, condition=manifest.condition,
        condition_hash=manifest.condition_hash(), agent_id=lead.id, agent=agent,
        policy=options.policy, images_for=images, cancel=cancel, watchdog=watchdog,
        networks=networks, manifest=manifest, upstreams=upstreams, timeout_override=manifest.trial_budget.timeout_seconds,
    )
    started = time.time()
    results: list[TrialResult] = []
    watchdog.start()
    pool = ThreadPoolExecutor(max_workers=options.n_concurrent, thread_name_prefix="trial")
    try:
        futures = [pool.submit(run_trial, ctx, task, attempt)
                   for attempt in range(options.k) for task in tasks]
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            if result.failure_mode == FailureMode.ANSWER_LEAK and not cancel.is_set():
                log.error("job.answer_leak", trial=result.trial_id[:12], task=result.task,
                          error=result.error)
                cancel.set()  # a leak stops the suite: no further trial starts
            if on_trial_done:
                on_trial_done(result, len(results), len(futures))
    except KeyboardInterrupt:
        log.warning("job.cancelling", job=options.job_name)
        cancel.set()
        reap(runtime, f"{LABEL_JOB}={options.job_name}")  # running trials fail fast
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        watchdog.stop()
        networks.close()
        if upstreams is not None:
            upstreams.close()
        leftovers = reap(runtime, f"{LABEL_JOB}={options.job_name}")
        if any(leftovers.values()):
            log.warning("job.reaped_leftovers", **leftovers)
    job = summarize(options, manifest, lead.agent, results, images.built, started)
    write_json_atomic(job_dir / "result.json", job)
    return job


def summarize(options: JobOptions, manifest: Manifest, agent: str,
              results: list[TrialResult], images_built: int, started: float) -> JobResult:
    results = sorted(results, key=lambda r: (r.task, r.attempt))
    counts = Counter(r.failure_mode.value for r in results)
    by_task: dict[str, list[float]] = {}
    for r in results:
        by_task.setdefault(r.task, []).append(r.headline)
    k = options.k
    return JobResult(
        job=options.job_name, condition=manifest.condition,
        condition_hash=manifest.condition_hash(), agent=agent, policy=options.policy, k=k,
        n_trials=len(results), counts=dict(counts),
        mean_reward=round(sum(r.headline for r in results) / len(results), 6) if results else 0.0,
        errored=[r.trial_id for r in results if r.failure_mode in ERRORED],
        pass_at_k=_mean([float(any(v >= 1.0 for v in vs)) for vs in by_task.values()]) if k > 1 else None,
        pass_hat_k=_mean([float(all(v >= 1.0 for v in vs)) for vs in by_task.values()]) if k > 1 else None,
        images_built=images_built, started_at=started, finished_at=time.time(),
        trials=[TrialSummary(trial_id=r.trial_id, task=r.task, attempt=r.attempt,
                             reward=r.reward.get("reward") if r.reward else None,
                             failure_mode=r.failure_mode, scenario_class=r.scenario_class,
                             layer=r.layer, recall_events=r.memory.get("recall_events", 0),
                             injected_chars=r.memory.get("injected_chars", 0),
                             audit_complete=r.memory.get("complete", True))
                for r in results],
    )


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


__all__ = ["JobOptions", "run_job", "reap", "FailureMode"]
