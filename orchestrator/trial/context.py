"""What every trial of a job shares (TrialContext), a trial's identity and folder, its
result's first form, and the phase bracket that times each phase and turns a failure in
the start and seed phases into a LaunchError."""

from __future__ import annotations

import errno
import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.agents import Agent
from orchestrator.errors import LaunchError
from orchestrator.host import DiskWatchdog, NetworkPool
from orchestrator.log import get_logger
from orchestrator.models import (
    JOB_CANCELLED,
    Manifest,
    Observers,
    PhaseStarted,
    TrialResult,
    trial_folder_name,
)
from orchestrator.paths import JobDir, TrialDir
from orchestrator.runtime import Runtime
from orchestrator.tasks import Task
from orchestrator.trial.images import TaskImages
from orchestrator.trial.trust import Trust
from orchestrator.util import write_json_atomic

if TYPE_CHECKING:
    from orchestrator.services import Upstreams

log = get_logger()


@dataclass
class TrialContext:
    """What every trial of a job shares."""

    runtime: Runtime
    job: str
    job_dir: Path
    condition: str
    condition_hash: str
    agent_id: str
    agent: Agent
    policy: str
    images_for: Callable[[Task], TaskImages]
    cancel: threading.Event
    watchdog: DiskWatchdog  # the job's writable-layer watchdog (agent and verifier containers)
    networks: NetworkPool
    manifest: Manifest
    upstreams: Upstreams | None = None
    observers: Observers | None = None  # told PhaseStarted
    timeout_override: float | None = None
    oci_runtime: str | None = None  # e.g. runsc (gVisor) for agent containers
    manifest_dir: Path | None = None  # where the manifest's prompt paths are relative to
    trust: Trust = field(default_factory=Trust)  # --ca-bundle in every container (trust.py)


def trial_id(job: str, task: Task, agent_id: str, attempt: int) -> str:
    return hashlib.sha256(f"{job}\0{task.content_hash}\0{agent_id}\0{attempt}".encode()).hexdigest()


def trial_dir(ctx: TrialContext, task: Task, tid: str) -> TrialDir:
    return JobDir(ctx.job_dir).trial(trial_folder_name(task.name, tid))


class Cancelled(Exception):
    pass


LAUNCH_PHASES = ("start", "seed")  # what fails there is the sandbox's launch (LaunchError)


@contextmanager
def phase(result: TrialResult, name: str, ctx: TrialContext) -> Iterator[None]:
    if ctx.cancel.is_set():
        raise Cancelled()
    started = time.monotonic()
    log.info("trial.phase", trial=result.trial_id[:12], task=result.task, phase=name)
    if ctx.observers is not None:
        ctx.observers.emit(PhaseStarted(result.trial_id, f"{result.task}#{result.attempt}", name))
    try:
        yield
    except (Cancelled, LaunchError):
        raise
    except Exception as exc:
        full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC  # a disk: decided by run_trial
        if name in LAUNCH_PHASES and not full:
            raise LaunchError(f"{name}: {exc.__class__.__name__}: {exc}") from exc
        raise
    finally:
        setattr(result.timings, name, round(time.monotonic() - started, 3))


def new_result(ctx: TrialContext, task: Task, attempt: int, tid: str) -> TrialResult:
    return TrialResult(
        trial_id=tid, job=ctx.job, task=task.name, task_path=str(task.path),
        content_hash=task.content_hash, condition=ctx.condition,
        condition_hash=ctx.condition_hash, agent=ctx.agent.name, policy=ctx.policy,
        attempt=attempt, verifier_mode=task.config.verifier.environment_mode,
        scenario_class=task.config.metadata.scenario_class,
        layer=task.config.metadata.evaluation_layer,
        ignored_fields=task.ignored_fields,
        schema_version=task.config.schema_version or task.config.version,
        started_at=time.time(),
    )


def cancelled_result(ctx: TrialContext, task: Task, attempt: int,
                     retries: list[str] | None = None) -> TrialResult:
    """The result of a trial the job gave up on before it could finish."""
    tid = trial_id(ctx.job, task, ctx.agent_id, attempt)
    result = new_result(ctx, task, attempt, tid)
    JOB_CANCELLED.onto(result)
    result.retries = list(retries or [])
    result.finished_at = time.time()
    write_json_atomic(trial_dir(ctx, task, tid).result, result)
    return result
