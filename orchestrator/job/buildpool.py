"""Images ahead of and beside trials: a job plans every image its trials will use, builds
them in a pool of their own, and hands a task's trials to the scheduler only once that
task's images exist, so a trial's slot and its cpu and memory reservation start then, not
while an image builds (a build runs in the engine's builder and uses none of the trial's
quota).

- Plan (`plan_images`): per task, the Dockerfiles its trials build (environment/Dockerfile,
  the separate verifier's tests/Dockerfile, each compose sidecar's build context), the
  images used as they are (Harbor's `docker_image`, a compose service's `image`) and the
  FROM bases they need; an estimate of the build's cost.
- Order: longest first by that estimate, so one long build does not start last. The job
  records trials' durations, not builds', so the estimate is a heuristic: per Dockerfile
  one unit, one per RUN line, FETCH_WEIGHT for a RUN that fetches (apt, pip, curl, ...),
  and one per 50 MB of build context.
- Shared steps: Dockerfiles of one dataset often begin alike (the same FROM, then the same
  `RUN apt-get update && ...` or `RUN pip install pytest ...`). The engine's builder caches
  each step by its parent and its text, so a step built once is found by every later build
  that begins the same way, but two builds running it at once both run it (the classic
  builder does not join them). So a build does not start while a running build shares one
  of its RUN steps not yet built in this job: a free builder takes the next build that
  shares nothing pending, or waits for the step to be in the cache (24 real tasks of one
  dataset: pairs with identical Dockerfiles had built side by side, each paying the pip
  install; see bench/RESULTS.md).
- Pool (`BuildPool`): `workers` builds at once (the job's default min(2, the engine's
  cpus): builds are CPU, disk and network, and trials run beside them). A build that
  fails is the task's, said once: the image cache keeps the failure, every trial of the
  task records it from its build phase, nothing builds it again in the job (no retry
  storm). Anything else (the engine gone mid-build) is not the task's: its trials are
  handed over all the same and build what is missing themselves, where the job's engine
  watch tells an outage from a trial's own failure.
- Warm tasks (their images most likely on the engine, from one listing by name) are taken
  by a thread of their own in the job's order, so a second run's trials start in the job's
  order (longest first by known durations), as they did before the pool.

Used by the local executor's jobs; a Ray job, a job under --image-budget-gb (building
everything ahead would pass the budget) and a single trial build in the trial itself, as
before (trial/lifecycle.py's build phase, through the same image cache).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.job.host_needs import FETCHES
from orchestrator.log import get_logger
from orchestrator.models import ImageBuild
from orchestrator.paths import TaskPaths
from orchestrator.runtime import BuildFailed
from orchestrator.tasks import Task, joined_lines
from orchestrator.trial import base_references

log = get_logger()
FETCH_WEIGHT = 5.0  # a RUN that fetches (apt-get, pip, curl...) against one that does not
CONTEXT_UNIT = 50 * 2**20  # bytes of build context worth one RUN line


@dataclass
class ImagePlan:
    """What one task's trials will use: Dockerfiles to build ((what, folder)), images used
    as they are, the bases those start FROM, and the estimate that orders the build."""

    task: Task
    dockerfiles: list[tuple[str, Path]] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)
    estimate: float = 0.0
    steps: set[str] = field(default_factory=set)  # shared_steps of every Dockerfile


def plan_images(task: Task) -> ImagePlan:
    plan = ImagePlan(task)
    env = task.config.environment
    if env.docker_image:
        plan.images.append(env.docker_image)
    paths = TaskPaths(task.path)
    if paths.dockerfile.is_file():
        plan.dockerfiles.append(("task", paths.environment))
    tests = task.tests_dirs[-1] if task.tests_dirs else paths.tests
    if task.config.verifier.environment_mode == "separate" and (tests / "Dockerfile").is_file():
        plan.dockerfiles.append(("verifier", tests))
    for name, service in (task.compose.sidecars if task.compose else {}).items():
        if service.build is not None:
            plan.dockerfiles.append((f"sidecar:{name}", paths.environment / service.build.context))
        elif service.image:
            plan.images.append(service.image)
    for _what, folder in plan.dockerfiles:
        text = _read(folder / "Dockerfile")
        plan.bases += [b for b in base_references(text) if b not in plan.bases]
        plan.estimate += dockerfile_cost(text) + _context_bytes(folder) / CONTEXT_UNIT
        plan.steps.update(shared_steps(text))
    return plan


def shared_steps(text: str) -> list[str]:
    """The RUN steps the engine's build cache can share with another Dockerfile: a key per
    RUN line of the first stage naming every instruction from the top down to it, up to the
    first COPY or ADD (from there the cache also hangs on the build context's files) or the
    next FROM. Two Dockerfiles with a key in common run that step alike: built once, the
    other finds it in the cache."""
    keys: list[str] = []
    prefix = hashlib.sha256()  # every instruction so far, one running hash (linear in the text)
    stage = False
    for line in joined_lines(text):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        instruction = words[0].upper()
        if instruction in ("COPY", "ADD") or (instruction == "FROM" and stage):
            break
        stage = stage or instruction == "FROM"
        prefix.update(" ".join([instruction, *words[1:]]).encode() + b"\n")
        if instruction == "RUN":
            keys.append(prefix.copy().hexdigest()[:16])
    return keys


def dockerfile_cost(text: str) -> float:
    """One unit for the Dockerfile, one per RUN line, FETCH_WEIGHT for a RUN that fetches."""
    cost = 1.0
    for line in joined_lines(text):
        stripped = line.strip()
        if stripped.upper().startswith("RUN"):
            cost += FETCH_WEIGHT if FETCHES.search(stripped) else 1.0
    return cost


def longest_first(plans: Iterable[ImagePlan]) -> list[ImagePlan]:
    """Largest estimate first; ties keep the given order (the job's trial order)."""
    return sorted(plans, key=lambda p: -p.estimate)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _context_bytes(folder: Path, cap: int = 20_000) -> int:
    """The build context's size (at most `cap` files looked at: an estimate, not a walk of
    a huge dataset)."""
    total, seen = 0, 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            seen += 1
            if seen > cap:
                return total
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class BuildPool:
    """Builds tasks' images ahead of their trials, `workers` at once, longest first, never
    two at once that share a RUN step not yet built; `on_ready(task)` is called exactly once
    per task planned, when its images exist, its build failed, or the job was cancelled (the
    scheduler then submits its trials, which find their images, record the failure, or are
    cancelled)."""

    def __init__(self, build: Callable[[Task], int], workers: int, cancel: threading.Event,
                 likely_built: Callable[[Task], bool] = lambda task: False):
        self.build, self.workers, self.cancel = build, max(1, workers), cancel
        self.likely_built = likely_built
        self._warm: ThreadPoolExecutor | None = None
        self.records: list[ImageBuild] = []
        self._guard = threading.Lock()
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        self._running: list[Future[None] | Future[bool]] = []
        self._turn = threading.Condition()  # guards the three below
        self._queue: list[ImagePlan] = []
        self._building: list[ImagePlan] = []
        self._built_steps: set[str] = set()

    def start(self, tasks: Iterable[Task], on_ready: Callable[[Task], None]) -> list[ImagePlan]:
        """Plan each task's images (once per task name); those `likely_built` are taken in
        the job's order by one thread of their own (a warm job's trials then become ready
        in the job's order, at once), the rest go to the workers, longest first. Returns
        the plans to build, in the order they are offered."""
        unique = {t.name: t for t in tasks}
        built = {name: self.likely_built(t) for name, t in unique.items()}
        warm = [plan_images(t) for t in unique.values() if built[t.name]]
        plans = longest_first(plan_images(t) for t in unique.values() if not built[t.name])
        self._queue = list(plans)
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="build")
        shared = sum(1 for n in Counter(k for p in plans for k in p.steps).values() if n > 1)
        log.info("build_pool.start", tasks=len(unique), to_build=len(plans), workers=self.workers,
                 shared_steps=shared, first=[p.task.name for p in plans[:5]])
        for _ in range(min(self.workers, len(plans))):
            self._running.append(self._pool.submit(self._work, on_ready))
        if warm:
            self._warm = ThreadPoolExecutor(max_workers=1, thread_name_prefix="build-warm")
            self._running += [self._warm.submit(self._build, plan, on_ready, 0) for plan in warm]
        return plans

    def _work(self, on_ready: Callable[[Task], None]) -> None:
        """One builder: the next build it may start, until none is left."""
        while (taken := self._next()) is not None:
            plan, shared = taken
            ok = False
            try:
                ok = self._build(plan, on_ready, shared)
            finally:
                with self._turn:
                    self._building.remove(plan)
                    if ok:
                        self._built_steps |= plan.steps
                    self._turn.notify_all()

    def _next(self) -> tuple[ImagePlan, int] | None:
        """The first queued plan that shares no unbuilt RUN step with a build running now,
        and how many of its steps an earlier build made; waits while every queued plan does
        (the running build puts the step in the cache, or fails and lets the next try)."""
        with self._turn:
            while self._queue:
                pending = {k for p in self._building for k in p.steps} - self._built_steps
                for i, plan in enumerate(self._queue):
                    if self.cancel.is_set() or not plan.steps & pending:
                        self._building.append(plan)
                        return self._queue.pop(i), len(plan.steps & self._built_steps)
                self._turn.wait()
            return None

    def _build(self, plan: ImagePlan, on_ready: Callable[[Task], None], shared: int) -> bool:
        """Build one task's images and tell `on_ready`; whether they were built."""
        task, started = plan.task, time.time()
        record = ImageBuild(task=task.name, started_at=started, finished_at=started,
                            estimate=round(plan.estimate, 2), shared_steps=shared)
        try:
            if not self.cancel.is_set():
                record.built = self.build(task)
        except BuildFailed as exc:
            record.error = str(exc)[-2000:]
            log.warning("build_pool.failed", task=task.name, error=str(exc)[-500:],
                        message=f"{task.name}: its images did not build; every trial of it records "
                                "this build failure (built once, not retried)")
        except Exception as exc:  # the engine failed, not the task: the trial's own build retries
            record.error = f"{exc.__class__.__name__}: {exc}"[:500]
            log.warning("build_pool.left_to_trials", task=task.name, error=record.error)
        finally:
            record.finished_at = time.time()
            log.info("build_pool.done", task=task.name, seconds=round(record.finished_at - started, 2),
                     built=record.built, shared_steps=shared, failed=record.error is not None)
            with self._guard:
                self.records.append(record)
                closed = self._closed
            if not closed:
                try:
                    on_ready(task)
                except Exception as exc:  # never lose the pool's thread to the scheduler
                    log.error("build_pool.on_ready_failed", task=task.name, error=str(exc))
        return record.error is None and not self.cancel.is_set()

    def stop(self, timeout: float = 15.0) -> None:
        """The job's end: builds still queued start only if the job was not cancelled (a
        cancelled job's skip theirs at once); what runs is waited for up to `timeout` (an
        engine build cannot be interrupted from here); later completions tell no one."""
        if self._pool is None:
            return
        self._pool.shutdown(wait=False)
        if self._warm is not None:
            self._warm.shutdown(wait=False)
        deadline = time.monotonic() + timeout
        for future in self._running:
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # cancelled, or still running past the timeout
                pass
        with self._guard:
            self._closed = True

    def in_start_order(self) -> list[ImageBuild]:
        with self._guard:
            return sorted(self.records, key=lambda r: r.started_at)
