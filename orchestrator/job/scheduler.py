"""Running many trials: a pool of n slots, resource-aware admission, infrastructure-only
retries with backoff that never hold a slot, and prompt cancellation.

- Admission, by the job's policy (--admission, the manifest's sandbox.admission):
  `cpu-limit` (a job's default: Harbor's and Docker's meaning of `cpus`): declared cpus
  are the container's limit (NanoCpus), not a reservation: trials share the cores as the
  kernel schedules them. `reserve`: a trial starts only when the running trials' declared
  cpus plus its own fit the host budget (--max-cpus), so a quota is never noise. Memory is
  reserved under both (it cannot be taken back): the running trials' memory_mb plus its
  own fit --max-memory-mb. A trial whose cpus pass the budget
  never runs under either (the engine refuses a limit above its cpus).
- With a build pool (job/buildpool.py) a trial is submitted only once its images exist, so
  its reservation and its slot start then, not while its image builds.
- Retries: infra_error and launch_error results are retried up to max_retries times after
  a tenacity exponential-with-jitter wait, spent on a timer thread, not in a pool slot.
  Agent failures (timeouts, OOM, low reward) never are, nor a result that says why another
  attempt would fail the same way (`not_retried`: the engine lacks the OCI runtime asked for).
- The engine gone (enginewatch): an attempt waits for the engine before it starts; a
  retryable result while the engine was gone is retried free (up to MAX_OUTAGE_RETRIES) once
  it answers, so an outage never spends a trial's own retries.
- Cancel: `cancel` set -> nothing new starts, waiting trials give up, running ones stop at
  their next phase.
"""

from __future__ import annotations

import concurrent.futures
import errno
import heapq
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from orchestrator.errors import InfraError
from orchestrator.executors import Item
from orchestrator.job.enginewatch import EngineGone, EngineWatch
from orchestrator.log import get_logger
from orchestrator.models import RETRIED, TrialResult, is_retried
from orchestrator.tasks import Task

log = get_logger()
RETRYABLE = RETRIED  # which modes are retried: models/failures.py, the one place
MAX_OUTAGE_RETRIES = 10  # retries an engine outage may cost one trial (an engine that flaps)


class AdmissionCancelled(Exception):
    pass


class JobDiskFull(InfraError):
    """The job folder's filesystem is full: stop cleanly, keep what was written."""


AdmissionPolicy = Literal["reserve", "cpu-limit"]
ADMISSION_POLICIES: tuple[AdmissionPolicy, ...] = ("reserve", "cpu-limit")


class Admission:
    """Declared cpus and memory of running trials, held under the host budget: memory
    always, cpus only under the `reserve` policy (`cpus` counts them under both: the
    job's peak_cpus says how far `cpu-limit` oversubscribed)."""

    def __init__(self, max_cpus: float, max_memory_mb: int, cancel: threading.Event,
                 policy: str = "reserve"):
        if policy not in ADMISSION_POLICIES:
            raise ValueError(f"admission policy {policy!r}: not one of {', '.join(ADMISSION_POLICIES)}")
        self.max_cpus, self.max_memory_mb, self.cancel = max_cpus, max_memory_mb, cancel
        self.policy: AdmissionPolicy = "cpu-limit" if policy == "cpu-limit" else "reserve"
        self.cpus = 0.0
        self.memory_mb = 0
        self.peak_cpus = 0.0
        self.peak_memory_mb = 0
        self.listener: Callable[[Task, str | None], None] | None = None  # (task, why waiting)
        self._cond = threading.Condition()

    def fits_ever(self, task: Task) -> bool:
        env = task.config.environment
        return env.cpus <= self.max_cpus and env.memory_mb <= self.max_memory_mb

    def why_waiting(self, task: Task) -> str | None:
        """Why `task` cannot start now (the budget it would pass), or None if it fits."""
        env = task.config.environment
        short = []
        if self.policy == "reserve" and self.cpus + env.cpus > self.max_cpus + 1e-9:
            short.append(f"cpus {self.cpus:g} of {self.max_cpus:g} in use, needs {env.cpus:g}")
        if self.memory_mb + env.memory_mb > self.max_memory_mb:
            short.append(f"memory {self.memory_mb} of {self.max_memory_mb} MB in use, needs {env.memory_mb}")
        return "; ".join(short) or None

    def acquire(self, task: Task) -> None:
        env = task.config.environment
        with self._cond:
            told = False
            while (reason := self.why_waiting(task)) is not None:
                if self.cancel.is_set():
                    raise AdmissionCancelled()
                if not told and self.listener is not None:
                    self.listener(task, reason)  # the live view says why this trial waits
                    told = True
                self._cond.wait(timeout=0.5)
            if told and self.listener is not None:
                self.listener(task, None)
            if self.cancel.is_set():
                raise AdmissionCancelled()
            self.cpus += env.cpus
            self.memory_mb += env.memory_mb
            self.peak_cpus = max(self.peak_cpus, self.cpus)
            self.peak_memory_mb = max(self.peak_memory_mb, self.memory_mb)

    def release(self, task: Task) -> None:
        env = task.config.environment
        with self._cond:
            self.cpus -= env.cpus
            self.memory_mb -= env.memory_mb
            self._cond.notify_all()


def _backoff_seconds(retry_number: int, multiplier: float = 1.0, maximum: float = 30.0) -> float:
    """tenacity's exponential backoff with full jitter, for the n-th retry (1-based)."""
    from tenacity import RetryCallState, Retrying, wait_random_exponential  # only on a retry

    state = RetryCallState(retry_object=Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = retry_number
    return wait_random_exponential(multiplier=multiplier, max=maximum)(state)


class Scheduler:
    def __init__(self, n_concurrent: int, admission: Admission, cancel: threading.Event,
                 max_retries: int = 2, backoff_multiplier: float = 1.0,
                 engine: EngineWatch | None = None):
        self.engine = engine
        self.pool = ThreadPoolExecutor(max_workers=n_concurrent, thread_name_prefix="trial")
        self.admission, self.cancel = admission, cancel
        self.max_retries, self.backoff_multiplier = max_retries, backoff_multiplier
        self._results: queue.Queue[tuple[Item, TrialResult | BaseException]] = queue.Queue()
        self._timers: list[threading.Timer] = []
        self._futures: list[concurrent.futures.Future[None]] = []  # attempts submitted, not done
        self._outstanding = 0
        self._lock = threading.Lock()
        self._ready: list[tuple[int, Item]] = []  # (rank in the job's order, item): a heap
        self.unstarted: list[Item] = []  # items given up on by a cancel

    def _attempt(self, item: Item, run_one: Callable[[Item], TrialResult],
                 on_cancelled: Callable[[Item], TrialResult]) -> None:
        """Exactly one entry reaches the queue for every attempt, whatever raises, so
        run() can never wait for an attempt that died."""
        try:
            if self.cancel.is_set():
                raise AdmissionCancelled()
            if self.engine is not None and not self.engine.wait():
                raise AdmissionCancelled()
            self.admission.acquire(item.task)
        except AdmissionCancelled:
            try:
                self._results.put((item, on_cancelled(item)))
            except BaseException as exc:  # e.g. the cancelled result could not be written
                self._results.put((item, exc))
            return
        except BaseException as exc:
            self._results.put((item, exc))
            return
        try:
            result = run_one(item)
        except BaseException as exc:  # orchestra itself failed (e.g. the job folder's disk is
            log.error("scheduler.attempt_crashed", task=item.task.name, error=str(exc))  # full)
            self._results.put((item, exc))
            return
        finally:
            self.admission.release(item.task)
        self._results.put((item, result))

    def _next_ready(self) -> Item:
        with self._lock:
            return heapq.heappop(self._ready)[1]

    def _attempt_next(self, run_one: Callable[[Item], TrialResult],
                      on_cancelled: Callable[[Item], TrialResult]) -> None:
        """Whichever ready item comes first in the job's order, taken when a slot is free
        (not when its images were done): the job's longest-first order holds among them."""
        self._attempt(self._next_ready(), run_one, on_cancelled)

    def _submit_ready(self, ranked: list[tuple[int, Item]], run_one: Callable[[Item], TrialResult],
                      on_cancelled: Callable[[Item], TrialResult]) -> None:
        with self._lock:
            for entry in ranked:
                heapq.heappush(self._ready, entry)
        for _ in ranked:
            self._submit(None, run_one, on_cancelled)

    def _submit(self, item: Item | None, run_one: Callable[[Item], TrialResult],
                on_cancelled: Callable[[Item], TrialResult]) -> None:
        """One attempt of `item`, or (None) of the first ready item when a slot frees."""
        try:
            future = self.pool.submit(self._attempt, item, run_one, on_cancelled) if item is not None \
                else self.pool.submit(self._attempt_next, run_one, on_cancelled)
        except RuntimeError:  # stop() shut the pool first (a retry's timer that was already
            item = item if item is not None else self._next_ready()
            try:  # firing, or a cancel racing run()'s first submits): the attempt is cancelled
                self._results.put((item, on_cancelled(item)))
            except BaseException as exc:
                self._results.put((item, exc))
            return
        with self._lock:
            self._futures = [f for f in self._futures if not f.done()] + [future]

    def run(self, items: list[Item], run_one: Callable[[Item], TrialResult],
            on_cancelled: Callable[[Item], TrialResult],
            on_done: Callable[[TrialResult], None],
            images_ready: Callable[[list[Task], Callable[[Task], None]], object] | None = None) -> int:
        """Run every item to its final result, each handed to `on_done` and not kept here (a
        long job's 2,000 full results held 28 MB); returns how many were final.
        `images_ready(tasks, then)`: a build pool (job/buildpool.py) that calls `then(task)`
        exactly once per task when its images exist (or its build failed, or the job was
        cancelled); a task's items become ready then, not before, and a free slot takes the
        ready item first in the given order."""
        finals = 0
        self._outstanding = len(items)
        if images_ready is None:
            for item in items:
                self._submit(item, run_one, on_cancelled)
        else:
            by_task: dict[str, list[tuple[int, Item]]] = {}
            for rank, item in enumerate(items):
                by_task.setdefault(item.task.name, []).append((rank, item))
            images_ready([group[0][1].task for group in by_task.values()],
                         lambda task: self._submit_ready(by_task.get(task.name, []), run_one, on_cancelled))
        while self._outstanding:
            try:
                item, result = self._results.get(timeout=0.25)
            except queue.Empty:
                continue
            if isinstance(result, BaseException):
                self.cancel.set()  # nothing new starts; the job stops cleanly
                if isinstance(result, EngineGone):
                    raise result
                if isinstance(result, OSError) and result.errno == errno.ENOSPC:
                    raise JobDiskFull(
                        f"no space left where the job writes ({result.filename or 'job folder'}); "
                        "the job stopped. Results already written are intact: free space and "
                        "resume with `orchestra run --resume JOB_DIR`.") from result
                raise InfraError(f"orchestra failed running {item.task.name}: {result}") from result
            retryable = is_retried(result.failure_mode, result.not_retried, self.cancel.is_set())
            outage = (retryable and self.engine is not None and item.outage_retries < MAX_OUTAGE_RETRIES
                      and self.engine.blamed(result.started_at, result.finished_at or time.time()))
            if outage or (retryable and len(item.retries) - item.outage_retries < self.max_retries):
                item.retries.append(f"{result.failure_mode.value}: {result.error}"
                                    + (" (the engine was gone: a free retry)" if outage else ""))
                item.outage_retries += int(outage)
                # an outage's retry waits for the engine in _attempt, not on a backoff
                delay = 0.0 if outage else _backoff_seconds(len(item.retries) - item.outage_retries,
                                                           self.backoff_multiplier)
                log.warning("trial.retry", task=item.task.name, attempt=item.attempt,
                            retry=len(item.retries), delay=round(delay, 2), engine_gone=outage,
                            error=result.error)
                timer = threading.Timer(delay, self._submit, (item, run_one, on_cancelled))
                timer.daemon = True
                with self._lock:
                    self._timers.append(timer)
                timer.start()
                continue
            self._outstanding -= 1
            finals += 1
            if finals % 64 == 0:  # the futures of finished attempts (submitted all at once) go
                with self._lock:
                    self._futures = [f for f in self._futures if not f.done()]
            on_done(result)
        return finals

    def stop(self, timeout: float = 15.0) -> None:
        """After a cancel: drop pending retries, wait (bounded) for running attempts."""
        with self._lock:
            for timer in self._timers:
                timer.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:  # shutdown() cancelled the queued ones: they never ran and never
            running = [f for f in self._futures if not f.cancelled()]  # will (wait() would
        concurrent.futures.wait(running, timeout=timeout)  # block on them to the timeout)

    def drain(self) -> list[tuple[Item, TrialResult | BaseException]]:
        out = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                return out
