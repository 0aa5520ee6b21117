"""Many trials: which ones (tasks x attempts, layers, resume), how (scheduler), and the
job result. Data flows one way: cli -> job -> trial -> runtime; results come back as
pydantic objects and are written once, atomically.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from orchestrator.agents import agent_for
from orchestrator.errors import InfraError, InputError
from orchestrator.executors import Executor, Item, TrialSpec, open_executor
from orchestrator.host import DiskWatchdog, NetworkPool, own, reap, reap_orphans, remaining
from orchestrator.job import durations
from orchestrator.job.budget import DiskBudget, EngineDiskFull
from orchestrator.job.buildpool import BuildPool
from orchestrator.job.enginewatch import EngineWatch
from orchestrator.job.options import JobOptions, attempts_for
from orchestrator.job.preflight import check_capabilities, preflight, with_sandbox_policy
from orchestrator.job.scheduler import Admission, Scheduler
from orchestrator.job.summary import summarize, trial_summary
from orchestrator.log import get_logger
from orchestrator.models import (
    AdmissionWaiting,
    EngineOutage,
    FailureMode,
    JobCapabilities,
    JobConfig,
    JobResult,
    Manifest,
    Observers,
    Planned,
    TaskRef,
    TrialFinished,
    TrialResult,
    TrialSummary,
    rerun_on_resume,
)
from orchestrator.paths import JobDir
from orchestrator.runtime import LABEL_JOB, Runtime, trust_registry
from orchestrator.tasks import Task
from orchestrator.trial import (
    ImageCache,
    TrialContext,
    cancelled_result,
    new_result,
    trial_dir,
    trial_id,
)
from orchestrator.util import write_json_atomic

if TYPE_CHECKING:
    from orchestrator.services import Upstreams


log = get_logger()


def load_finished(job_dir: Path, tasks: list[Task],
                  retry_errors: bool = False) -> dict[str, TrialResult]:
    """Complete results already in the job folder (a truncated or unreadable one, or a
    cancelled trial, counts as missing; with retry_errors so do infra, launch and build
    errors). A trial of a task whose content changed is an error."""
    finished: dict[str, TrialResult] = {}
    hashes = {t.name: t.content_hash for t in tasks}
    changed = set()
    for path in JobDir(job_dir).trial_results():
        try:
            result = TrialResult.model_validate_json(path.read_text())
        except (ValidationError, ValueError, OSError):
            log.warning("resume.unreadable_result", path=str(path))
            continue
        if rerun_on_resume(result.failure_mode, bool(result.finished_at), retry_errors):
            continue
        if result.task in hashes and hashes[result.task] != result.content_hash:
            changed.add(result.task)
            continue
        finished[result.trial_id] = result
    if changed:
        raise InputError([f"{job_dir}: task {name!r} changed since this job ran (content hash "
                          "differs); resume would mix two versions. Start a new job instead."
                          for name in sorted(changed)])
    return finished


def trial_spec(options: JobOptions, manifest: Manifest, upstreams: Upstreams | None,
               ca_bundle: bytes | None) -> TrialSpec:
    """Every option of this job a trial depends on, as executors carry it."""
    return TrialSpec(
        job=options.job_name,
        manifest=manifest,  # itself (its set fields too): the same condition hash, byte for byte
        manifest_dir=str(options.manifest_dir) if options.manifest_dir else None,
        policy=options.policy, upstreams=upstreams.by_name if upstreams else {},
        ca_bundle=ca_bundle, build_policy=options.build_policy, oci_runtime=options.oci_runtime,
        registry=options.registry)


def run_job(runtime: Runtime, tasks: list[Task], manifest: Manifest, options: JobOptions,
            observers: Observers | None = None) -> JobResult:
    """Run every trial of `tasks` under `manifest`; `observers` are told its lifecycle events
    (models/events.py: Planned, PhaseStarted, AdmissionWaiting, TrialFinished)."""
    return Job(runtime, tasks, manifest, options, observers).run()


class Job:
    """One job as a template method: `run` = prepare (pre-flight before any spend, the job
    folder's config, the job's helpers and trial context), plan (the trials left to run, in
    order, under the disk budget), execute (the scheduler, observers told), finish (drain,
    clean up, summarize, write result.json), whatever interrupts it."""

    def __init__(self, runtime: Runtime, tasks: list[Task], manifest: Manifest, options: JobOptions,
                 observers: Observers | None = None):
        self.runtime, self.tasks, self.manifest = runtime, tasks, manifest
        self.options = with_sandbox_policy(options, manifest)
        self.observers = observers or Observers()
        self.job_dir = self.options.jobs_dir / self.options.job_name
        self.cancel = threading.Event()
        # what the job keeps of each finished trial (its full result is in its folder): a
        # summary, and its wall time by task content for durations.json (2,000 full results
        # held 28 MB; their summaries hold about a tenth)
        self.results: list[TrialSummary] = []
        self.seconds: dict[str, list[float]] = {}

    def run(self) -> JobResult:
        self.prepare()
        todo, total = self.plan()
        self.observers.emit(Planned(total, len(self.results)))
        started, interrupted = time.time(), False
        try:
            self.execute(todo, total)
        except KeyboardInterrupt:
            interrupted = True
            self.interrupt()
        finally:
            job, left = self.finish(todo, started, interrupted)
        if interrupted:
            raise KeyboardInterrupt
        if left:  # the trials finished, but something orchestra made outlived the clean-up
            raise InfraError(f"job {self.options.job_name}: results are written, but clean-up could not "
                             f"remove: {', '.join(left[:10])}{' ...' if len(left) > 10 else ''}; "
                             "run `orchestra cleanup` and check the engine")
        return job

    def prepare(self) -> None:
        """Refuse what cannot run, before any spend; then the job's folder and helpers."""
        runtime, options, manifest = self.runtime, self.options, self.manifest
        self.engine = engine = runtime.engine_facts()
        self.executor = open_executor(options.backend, options.ray_address)
        capacity_cpus, capacity_mb = self.executor.capacity() or (engine.cpus, engine.memory_mb)
        self.admission = Admission(options.max_cpus or capacity_cpus,
                                   options.max_memory_mb or capacity_mb, self.cancel,
                                   options.admission or manifest.sandbox.admission or "cpu-limit")
        in_use = preflight(self.tasks, manifest, options.endpoints, self.admission)
        self.capabilities = check_capabilities(runtime, options, engine, self.tasks, manifest)
        self.lead = lead = manifest.orchestrator
        self.agent = agent = agent_for(lead, options.manifest_dir, options.ca_bundle)  # re-hashes the prompt
        agent.binds()  # an installed CLI is installed on this host now, not in a trial's phases
        self.finished = load_finished(self.job_dir, self.tasks, options.retry_errors) if options.resume else {}
        self.upstreams: Upstreams | None = None
        if in_use:  # model endpoints: the proxy's module only then
            from orchestrator.services import Upstreams

            assert options.endpoints is not None  # preflight refused endpoints without a config
            self.upstreams = Upstreams.open(in_use, options.endpoints, options.replay_from)
        # before any trial, not beside them: the reaper removes a dead job's objects by its
        # job label, and a resumed job has the same name (its new objects would go too)
        reap_orphans(runtime)
        self._write_config()
        ca_bundle = options.ca_bundle.read_bytes() if options.ca_bundle else None
        if options.registry:  # the user's: its credentials may go there (a dataset's FROM gets none)
            trust_registry(options.registry)
        self.images = ImageCache(runtime, options.job_name, lead.install if lead.agent == "command" else None,
                                 ca_bundle, options.build_policy, options.registry,
                                 options.bases or manifest.sandbox.bases or "auto")
        self.watchdog = DiskWatchdog(runtime, options.job_name)
        self.networks = NetworkPool(runtime, options.job_name)
        self.spec = trial_spec(options, manifest, self.upstreams, ca_bundle)
        self.ctx = self.spec.context(runtime=runtime, job_dir=self.job_dir, images_for=self.images,
                                     watchdog=self.watchdog, networks=self.networks, cancel=self.cancel,
                                     upstreams=self.upstreams, ca_file=options.ca_bundle, agent=agent,
                                     observers=self.observers)

    def _write_config(self) -> None:
        options, manifest = self.options, self.manifest
        write_json_atomic(JobDir(self.job_dir).config, JobConfig(
            job=options.job_name,
            # Only what was set: read back, it gives the same condition hash, byte for byte.
            manifest=manifest.model_dump(mode="json", exclude_unset=True),
            condition_hash=manifest.condition_hash(), k=options.k,
            n_concurrent=options.n_concurrent, policy=options.policy,
            source=options.source,
            trials=sum(attempts_for(t, options.k) for t in self.tasks),  # the viewer's "of N"
            tasks=[TaskRef(name=t.name, path=str(t.path), content_hash=t.content_hash) for t in self.tasks],
        ))

    def plan(self) -> tuple[list[Item], int]:
        """The trials left to run (resume skips the finished; one that can never fit fails
        alone, with the numbers), in order; the disk budget over them. Returns (todo, total)."""
        ctx, options, finished = self.ctx, self.options, self.finished
        items = [Item(task, attempt) for task in self.tasks for attempt in range(attempts_for(task, options.k))]
        todo = [i for i in items if trial_id(ctx.job, i.task, ctx.agent_id, i.attempt) not in finished]
        for item in [i for i in todo if not self.admission.fits_ever(i.task)]:
            todo.remove(item)
            finished[trial_id(ctx.job, item.task, ctx.agent_id, item.attempt)] = _infeasible_result(
                ctx, item.task, item.attempt, self.admission)
        todo, self.order = _ordered(todo, self.agent.name, options)
        self.budget = DiskBudget(self.runtime, self.images, Counter(i.task.name for i in todo),
                                 options.image_budget_gb, self.engine, options.budget_interval)
        self.budget.check_data_root()  # a disk already nearly full: exit 3 before any trial
        if options.resume:
            log.warning("resume.plan", finished=len(finished), rerun=len(todo),
                        message=f"resume: {len(finished)} trial(s) already complete, re-running "
                                f"{len(todo)}" if todo else "resume: nothing left to run")
        for result in finished.values():
            self._keep(result)
        self.admission.listener = lambda task, why: self.observers.emit(AdmissionWaiting(task.name, why))
        return todo, len(items)

    def execute(self, todo: list[Item], total: int) -> None:
        """The scheduler runs `todo`; each final result is taken in by `_done`."""
        options, ctx = self.options, self.ctx
        # the engine this process talks to: on Ray each node's engine is its own (a node's
        # outage is its trials' infra errors, retried as such)
        self.engine_watch = EngineWatch(self.runtime.unanswered, options.engine_wait, self.cancel) \
            if options.backend == "local" else None
        self.scheduler = Scheduler(options.n_concurrent, self.admission, self.cancel, options.max_retries,
                                   options.backoff_multiplier, self.engine_watch)
        self.watchdog.start()
        self.builds = self._build_pool()
        self.scheduler.run(todo, self.executor.runner(ctx, self.spec),
                           lambda item: cancelled_result(ctx, item.task, item.attempt, item.retries),
                           lambda result: self._done(result, total),
                           self.builds.start if self.builds is not None else None)

    def _build_pool(self) -> BuildPool | None:
        """Images ahead of trials (job/buildpool.py), min(2, the engine's cpus) at once by
        default (2 cores, one run each: 24 real tasks whose builds fetch from PyPI took 72.5 s
        with 2 builders, 61.0 with 3, 67.1 with 4; bench/dataset.py's CPU-bound builds 32.5 s
        with 2 and 42.3 s with 3); none on Ray (each node builds or pulls its own) or under an image budget
        (everything built ahead would pass it): there each trial builds its own, as before."""
        options = self.options
        workers = options.build_workers if options.build_workers is not None \
            else min(2, max(1, int(self.engine.cpus or 1)))
        if workers <= 0 or options.backend != "local" or options.image_budget_gb is not None:
            return None
        return BuildPool(lambda task: self.images.ahead(task, self.ctx.trust), workers, self.cancel,
                         self.images.likely_built())

    def _keep(self, result: TrialResult) -> None:
        self.results.append(trial_summary(result))
        if (seconds := durations.seconds_of(result)) is not None and result.agent == self.agent.name:
            self.seconds.setdefault(result.content_hash, []).append(seconds)

    def _done(self, result: TrialResult, total: int) -> None:
        self._keep(result)
        try:
            self.budget.trial_done(result.task)
        except EngineDiskFull:
            self.cancel.set()  # nothing new starts; running trials stop at their next phase
            raise
        if result.failure_mode == FailureMode.ANSWER_LEAK and not self.cancel.is_set():
            log.error("job.answer_leak", trial=result.trial_id[:12], task=result.task, error=result.error)
            self.cancel.set()  # a leak stops the suite: no further trial starts
        self.observers.emit(TrialFinished(result, len(self.results), total))

    def interrupt(self) -> None:
        """Ctrl-C: nothing new starts; running trials stop now and clean up after themselves."""
        log.warning("job.cancelling", job=self.options.job_name)
        self.cancel.set()
        for container in self.runtime.labelled(*own(f"{LABEL_JOB}={self.options.job_name}"))[0]:
            self.runtime.kill(container)

    def finish(self, todo: list[Item], started: float, interrupted: bool) -> tuple[JobResult, list[str]]:
        """Every trial accounted for (never reached: cancelled), the job's objects removed,
        the result summarized and written. Returns it and what clean-up could not remove."""
        ctx, options = self.ctx, self.options
        scheduler = getattr(self, "scheduler", None)
        builds: BuildPool | None = getattr(self, "builds", None)
        seen = {r.trial_id for r in self.results}
        if builds is not None:
            builds.stop(timeout=15.0 if interrupted else 3600.0)
        if scheduler is not None:
            scheduler.stop(timeout=15.0 if interrupted else 3600.0)
            for _item, result in scheduler.drain():
                if isinstance(result, BaseException):  # a crashed attempt: cancelled below
                    continue
                if result.trial_id not in seen:
                    seen.add(result.trial_id)
                    self._keep(result)
        for item in todo:  # anything that never reached a final result
            if trial_id(ctx.job, item.task, ctx.agent_id, item.attempt) not in seen:
                self._keep(cancelled_result(ctx, item.task, item.attempt, item.retries))
        left = _clean_up_job(self.runtime, options.job_name, self.watchdog, self.networks,
                             self.upstreams, self.executor)
        self.images.flush()
        try:
            self.budget.finish()
        except Exception as exc:  # the budget never costs a job its result
            log.warning("images.prune_failed", error=str(exc)[:300])
        job = self.summary(started)
        try:
            write_json_atomic(JobDir(self.job_dir).result, job)
        except OSError as exc:  # e.g. the disk is full: the trial results already written stay
            log.error("job.result_not_written", error=str(exc))
        return job, left

    def summary(self, started: float) -> JobResult:
        job = summarize(self.options, self.manifest, self.lead.agent, self.results, self.images.built,
                        started, self.admission)
        job.images_pushed, job.images_pruned, job.order = self.images.pushed, len(self.budget.pruned), self.order
        job.admission = self.admission.policy
        if (builds := getattr(self, "builds", None)) is not None:
            job.builds = builds.in_start_order()
        durations.record(self.agent.name, durations.medians(self.seconds))
        watch = getattr(self, "engine_watch", None)
        if watch is not None:
            job.engine_outages = [EngineOutage(gone_at=gone, seconds=round(back - gone, 1))
                                  for gone, back in watch.outages]
            job.engine_down_seconds = watch.down_seconds
        job.capabilities = JobCapabilities(**asdict(self.capabilities))
        return job


def _ordered(todo: list[Item], agent: str, options: JobOptions) -> tuple[list[Item], str]:
    """Longest first where durations are known (job/durations.py): the baseline's, then
    this host's record. Returns the order and how it was chosen (the job result's `order`)."""
    if not options.longest_first:
        return todo, "given"
    known = {**durations.recorded(agent), **(options.durations or {})}
    keyed = sum(1 for i in todo if i.task.content_hash in known)
    if not keyed:
        return todo, "given (no durations known)"
    order = (f"longest first ({keyed} of {len(todo)} trials by known durations"
             f"{', the baseline' if options.durations else ''}, the rest first)")
    log.info("job.order", order=order)
    return durations.longest_first(todo, lambda i: i.task.content_hash, known), order


def _clean_up_job(runtime: Runtime, job: str, watchdog: DiskWatchdog, networks: NetworkPool,
                  upstreams: Upstreams | None, executor: Executor) -> list[str]:
    """Stop the job's helpers and remove everything it made. Each step is independent and
    never raises: removal is idempotent and races with trials' own clean-up (or a Ray
    node's reaper on the same engine) are expected. Returns what is still there."""
    label = f"{LABEL_JOB}={job}"
    steps = [("watchdog", watchdog.stop), ("networks", networks.close)]
    if upstreams is not None:
        steps.append(("upstreams", upstreams.close))
    steps += [("executor_reap", lambda: executor.reap(label)), ("executor_close", executor.close)]
    reaped: dict[str, int] = {}

    def reap_the_job() -> None:
        reaped.update(reap(runtime, own(label)))
        _log_reaped(reaped)
    steps.append(("reap", reap_the_job))
    for name, step in steps:
        try:
            step()
        except Exception as exc:
            log.warning("job.cleanup_step_failed", step=name, error=str(exc)[:300])
    # the reap's listing (just now) found none of the job's objects: none can be left
    listed_none = bool(reaped) and not any(reaped[k] for k in ("containers", "networks", "volumes"))
    try:
        left = remaining(runtime, own(label), engine_objects=not listed_none)
    except Exception as exc:  # the engine is gone: nothing more can be checked
        log.error("job.cleanup_unverified", error=str(exc)[:300])
        return [f"(unverified: {exc.__class__.__name__})"]
    if left:
        log.error("job.cleanup_incomplete", job=job, left=left[:20])
    return left


def _log_reaped(counts: dict[str, int]) -> None:
    if any(counts.values()):
        log.info("job.reaped_leftovers", **counts)


def _infeasible_result(ctx: TrialContext, task: Task, attempt: int,
                      admission: Admission) -> TrialResult:
    env = task.config.environment
    tid = trial_id(ctx.job, task, ctx.agent_id, attempt)
    result = new_result(ctx, task, attempt, tid)
    result.failure_mode = FailureMode.INFEASIBLE
    result.error = (f"[environment] cpus={env.cpus:g}, memory_mb={env.memory_mb} can never fit "
                    f"this host's budget (--max-cpus {admission.max_cpus:g}, --max-memory-mb "
                    f"{admission.max_memory_mb}); not run")
    result.finished_at = time.time()
    write_json_atomic(trial_dir(ctx, task, tid).result, result)
    log.warning("trial.infeasible", task=task.name, attempt=attempt, error=result.error)
    return result


__all__ = ["JobOptions", "run_job", "reap", "FailureMode", "trial_dir"]
