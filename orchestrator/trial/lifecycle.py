"""One trial, phase by phase (DESIGN 2): build, start, seed, agent, collect, verify, cleanup.

This file reads top to bottom like the lifecycle. It never builds engine API requests
(runtime/), never parses task files (tasks.py) and never formats output (report/).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shlex
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import scrub
from orchestrator.agents.base import EXIT_OUTCOMES, Agent, render_command
from orchestrator.archive import tar_directory, tar_files
from orchestrator.errors import LaunchError
from orchestrator.host.netpool import NetworkPool
from orchestrator.host.watchdog import DiskWatchdog
from orchestrator.log import get_logger
from orchestrator.models.manifest import Manifest, flag_env
from orchestrator.models.result import FailureMode, TrialResult
from orchestrator.paths import AGENT_LOGS, ARTIFACTS, INSTRUCTION, TrialDir
from orchestrator.runtime.base import BuildFailed, Network, Runtime
from orchestrator.scrub import scrub_tree
from orchestrator.services.exchanges import RECORD
from orchestrator.tasks.load import Task
from orchestrator.tasks.memory import StateRoots, file_seed_archive, seed_engrams
from orchestrator.trial.audit import audit_trajectory, grading_files
from orchestrator.trial.collect import EVIDENCE_NAME, collect, export_evidence
from orchestrator.trial.images import TaskImages
from orchestrator.trial.sandbox import (
    Sandbox,
    applied_limits,
    close_sandbox,
    open_sandbox,
    require_runtime,
    resolve_workdir,
    wait_healthy,
)
from orchestrator.trial.steps import run_steps
from orchestrator.trial.trust import Trust
from orchestrator.trial.verify import verify
from orchestrator.trial.workers import start_workers, stop_workers
from orchestrator.util import write_json_atomic

if TYPE_CHECKING:  # imported where a trial needs them: a model proxy, a relay, an egress proxy
    from orchestrator.services.egress import EgressProxy
    from orchestrator.services.proxy import ModelProxy, Upstreams
    from orchestrator.services.relay.session import TrialRelay

log = get_logger()

KILL_AFTER_SEC = 5  # `timeout -k`: SIGTERM at the deadline, SIGKILL this much later
WATCHDOG_GRACE_SEC = 3  # the host kills the container this long after that


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
    on_phase: Callable[[str, str, str], None] | None = None  # (trial id, task, phase)
    timeout_override: float | None = None
    oci_runtime: str | None = None  # e.g. runsc (gVisor) for agent containers
    manifest_dir: Path | None = None  # where the manifest's prompt paths are relative to
    trust: Trust = field(default_factory=Trust)  # --ca-bundle in every container (trust.py)


def trial_id(job: str, task: Task, agent_id: str, attempt: int) -> str:
    return hashlib.sha256(f"{job}\0{task.content_hash}\0{agent_id}\0{attempt}".encode()).hexdigest()


def trial_dir(ctx: TrialContext, task: Task, tid: str) -> TrialDir:
    return TrialDir(ctx.job_dir / "trials" / f"{task.short_name}__{tid[:12]}")


class Cancelled(Exception):
    pass


LAUNCH_PHASES = ("start", "seed")  # what fails there is the sandbox's launch (LaunchError)


@contextmanager
def phase(result: TrialResult, name: str, ctx: TrialContext) -> Iterator[None]:
    if ctx.cancel.is_set():
        raise Cancelled()
    started = time.monotonic()
    log.info("trial.phase", trial=result.trial_id[:12], task=result.task, phase=name)
    if ctx.on_phase is not None:
        ctx.on_phase(result.trial_id, f"{result.task}#{result.attempt}", name)
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
    result.failure_mode, result.error = FailureMode.CANCELLED, "job cancelled"
    result.retries = list(retries or [])
    result.finished_at = time.time()
    write_json_atomic(trial_dir(ctx, task, tid).result, result)
    return result


def run_trial(ctx: TrialContext, task: Task, attempt: int,
              retries: list[str] | None = None) -> TrialResult:
    tid = trial_id(ctx.job, task, ctx.agent_id, attempt)
    paths = trial_dir(ctx, task, tid)
    paths.set_aside_earlier_try()  # every run starts from an empty folder
    result = new_result(ctx, task, attempt, tid)
    result.retries = list(retries or [])
    box: Sandbox | None = None
    trial_secrets: list[str] = []
    relay: TrialRelay | None = None
    proxy: ModelProxy | None = None
    egress: EgressProxy | None = None

    def start_services(network: Network) -> dict[str, str]:
        """The relay, the model proxy and (under an allowlist) the egress proxy, on the
        trial network's gateway."""
        nonlocal relay, proxy, egress
        env: dict[str, str] = {}
        if task.config.network_for("agent") == "allowlist":
            from orchestrator.services.egress import EgressProxy

            egress = EgressProxy(network.gateway, task.config.allowed_hosts_for("agent")).start()
            env.update(egress.env(direct=[network.gateway]))
        if task.uses_relay:
            from orchestrator.services.relay.session import start_relay

            relay = start_relay(task, ctx.manifest, network.gateway, tid, ctx.job)
            result.relay["start_sec"] = round(relay.started_sec, 4)
            env.update(relay.env_for(relay.lead))
            trial_secrets.extend(relay.secrets())
        lead = ctx.manifest.orchestrator
        if lead.endpoint and ctx.upstreams is not None:
            from orchestrator.services.proxy import ModelProxy

            upstream = ctx.upstreams.by_name[lead.endpoint]
            timeout = ctx.timeout_override or task.config.agent.timeout_sec
            proxy = ModelProxy.for_upstream(network.gateway, upstream, lead.budget,
                                            ctx.manifest.prices, time.time() + timeout + 60,
                                            record=paths.root / RECORD)
            env.update({**upstream.env, **proxy.env()})
            trial_secrets.append(proxy.token)
        scrub.register(*trial_secrets)
        return env

    def episode(view: Task, where: TrialDir, last: bool) -> None:
        """One instruction, start to grade: agent, collect, verify (a multi-step task runs
        one per step in the same environment; `where` is that step's folder)."""
        assert box is not None
        with phase(result, "agent", ctx):
            if relay is not None and relay.task_event_id is None:
                relay.post_instruction()
            deadline = time.time() + (ctx.timeout_override or view.config.agent.timeout_sec)
            workers = start_workers(ctx, view, box, relay, images.agent_image, deadline,
                                    flags=active_flags(ctx, view))
            try:
                run_agent(ctx, view, box, result, handed_over=handed_over)
            finally:
                if workers:
                    result.workers = stop_workers(ctx.runtime, workers, where, ctx.watchdog)
        with phase(result, "collect", ctx):
            collect(ctx.runtime, view, box, where)
            result.collected = dict(box.collected)
            if relay is not None and last:
                export_evidence(relay, where, result)
            derived = ctx.agent.finish(where.agent, paths.root / RECORD)  # its trajectory
            scrubbed = scrub_tree(where.root, scrub.current())  # the trial's own included
            if scrubbed:  # the agent wrote a secret somewhere: replaced, and said so
                result.scrubbed_files = (result.scrubbed_files + scrubbed)[:50]
            audit = audit_trajectory(
                where.agent / "trajectory.jsonl", view.facts, view.config.memory.markers,
                view.config.memory.markers_in_prefix, state_home=roots.state_home,
                truncated=bool((result.collected.get(AGENT_LOGS) or {}).get("truncated")),
                grading=grading_files(view.path, with_memory=ctx.policy != "memory-on"))
            if derived:
                audit.mark_incomplete(derived)
            leaks = list(result.memory.get("leaks", []))
            result.memory.update(audit.as_dict())
            result.memory["leaks"] = leaks + audit.leaks
        with phase(result, "verify", ctx):
            verify(ctx.runtime, view, images, box, where, result,
                   evidence=where.artifacts / EVIDENCE_NAME if relay is not None and last else None,
                   watchdog=ctx.watchdog, keep_alive=not last)

    try:
        with phase(result, "build", ctx):
            images = ctx.images_for(task)
            result.image, result.base_alias = images.agent_image, images.base_alias
            result.stand_ins = [s.as_dict() for s in images.stand_ins]
            result.image_source = images.source
            result.image_pulled_from = list(images.pulled)
        roots = StateRoots.fresh()
        with phase(result, "start", ctx):
            workdir = resolve_workdir(ctx.runtime, task, images.agent_image)
            env = {**task.config.environment.env, **agent_flags(ctx, task), **roots.env(workdir)}
            box = open_sandbox(ctx.runtime, ctx.networks, task, images.agent_image, ctx.job,
                               tid, env=env, workdir=workdir, services=start_services,
                               oci_runtime=ctx.oci_runtime, binds=ctx.agent.binds(),
                               trust=ctx.trust)
            box.egress, result.compose_services = egress, sorted(box.sidecars)
            box.allowed_hosts = {phase: task.config.allowed_hosts_for(phase) for phase in ("agent", "verifier")}
            result.limits = applied_limits(ctx.runtime, box, task)
            require_runtime(ctx.runtime, box, box.agent, "agent", result.limits.oci_runtime)
            ctx.watchdog.register(box.agent, task.config.environment.storage_mb)
            if task.config.environment.healthcheck is not None:
                result.healthchecks = wait_healthy(ctx.runtime, box,
                                                   task.config.environment.healthcheck)
        # a one-instruction task's hand-over travels with the seed: one copy into the container
        handed_over = not task.config.steps
        with phase(result, "seed", ctx):
            seed_files(ctx, task, box, roots, result,
                       handover=handover_files(ctx, task) if handed_over else None)
            if ctx.policy == "memory-on" and task.seeds:
                records = seed_engrams(ctx.runtime, box.agent, task.seeds,
                                       user=task.config.agent.user, env=box.exec_env)
                result.memory["engram_seeds"] = [asdict(r) for r in records]
        if task.config.steps:
            run_steps(ctx.runtime, task, box, paths, result, episode)
        else:
            episode(task, paths, last=True)
        if result.memory.get("leaks"):  # void: counted as failed everywhere, listed as void
            result.failure_mode = FailureMode.ANSWER_LEAK
            result.error = "answer leak: " + "; ".join(result.memory["leaks"][:5])
            result.voided_reward, result.reward = result.reward, None
    except Cancelled:
        result.failure_mode, result.error = FailureMode.CANCELLED, "job cancelled"
    except BuildFailed as exc:
        result.failure_mode, result.error = FailureMode.BUILD_ERROR, str(exc)[-4000:]
    except Exception as exc:  # the engine failed, or orchestra did: never lose the result
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC and _own_disk_full(ctx, box, exc):
            result.failure_mode = FailureMode.DISK_LIMIT  # the agent filled its own disk
            result.error = (f"the trial's own disk is full (storage_mb="
                            f"{task.config.environment.storage_mb}): {exc}")
            return _finish(ctx, result, paths, box, relay, proxy, trial_secrets, egress)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:  # the host is full: stop the
            result.failure_mode, result.error = FailureMode.INFRA_ERROR, f"host disk full: {exc}"
            try:  # job (scheduler), after removing this trial's sandbox
                _finish(ctx, result, paths, box, relay, proxy, trial_secrets, egress)
            except OSError:
                pass
            raise
        if ctx.cancel.is_set():
            result.failure_mode, result.error = FailureMode.CANCELLED, "job cancelled"
            return _finish(ctx, result, paths, box, relay, proxy, trial_secrets, egress)
        if isinstance(exc, LaunchError):
            result.failure_mode, result.error = FailureMode.LAUNCH_ERROR, str(exc)
        else:
            result.failure_mode, result.error = FailureMode.INFRA_ERROR, f"{exc.__class__.__name__}: {exc}"
        log.error("trial.error", trial=tid[:12], task=task.name, error=result.error,
                  traceback=traceback.format_exc(limit=8))
    return _finish(ctx, result, paths, box, relay, proxy, trial_secrets, egress)


def _own_disk_full(ctx: TrialContext, box: Sandbox | None, exc: OSError) -> bool:
    """ENOSPC from the trial's own loop disk (its blocks or inodes, used up by the agent) is
    the trial's disk_limit; only the job folder's filesystem filling up stops the job."""
    if box is None or box.loop_disk is None:
        return False
    mount = str(box.loop_disk.mountpoint)
    if exc.filename and str(exc.filename).startswith(mount):
        return True
    try:  # no file named: whichever filesystem is really out of room decides
        job = os.statvfs(ctx.job_dir)
        return job.f_bavail * job.f_frsize > 64 * 2**20 and job.f_favail > 1000
    except OSError:
        return False


def _finish(ctx: TrialContext, result: TrialResult, paths: TrialDir, box: Sandbox | None,
            relay: TrialRelay | None, proxy: ModelProxy | None,
            secrets: list[str], egress: EgressProxy | None = None) -> TrialResult:
    """Stop the trial's services, remove its sandbox, write result.json (always), then
    forget the trial's secrets (until then every log event is scrubbed of them)."""
    if ctx.cancel.is_set() and (result.reward is None or result.failure_mode != FailureMode.NONE) \
            and result.failure_mode != FailureMode.ANSWER_LEAK:
        # Interrupted by the job's own cancellation, in whatever phase (the kill may have
        # surfaced as a verifier error, a timeout or an engine error): cancelled, resumable.
        result.error = f"job cancelled (in phase: {result.failure_mode.value}: {result.error})" \
            if result.failure_mode != FailureMode.NONE else "job cancelled"
        result.failure_mode = FailureMode.CANCELLED
    if proxy is not None:
        proxy.stop()
        result.tokens = proxy.stats.prompt_tokens + proxy.stats.completion_tokens
        result.cost = round(proxy.stats.cost, 6)
        result.model = proxy.summary()
        result.agent_outcome = classify_agent(result, proxy)
        stats = proxy.stats
        if (stats.upstream_errors or stats.abandoned) and result.failure_mode == FailureMode.NONE \
                and result.headline < 1.0:
            # the provider failed, not the agent: an error (retried), never the agent's 0
            result.failure_mode = FailureMode.ENDPOINT_ERROR
            result.error = ("the model endpoint failed after retries: " + (stats.last_error or "")
                            if stats.upstream_errors else "the model endpoint did not answer before "
                            "the agent stopped waiting (the proxy did not re-send)")
    elif result.agent_outcome is None and result.agent_exit_code is not None:
        result.agent_outcome = classify_agent(result, None)
    if relay is not None:
        result.relay.update(relay.server.bounds())
        relay.stop()
    if egress is not None:
        egress.stop()
        result.egress = egress.summary()
    if box is not None:
        ctx.watchdog.unregister(box.agent)
        result.container_runtimes = dict(box.runtimes)
        result.timings.cleanup = round(close_sandbox(ctx.runtime, box), 3)
    result.finished_at = time.time()
    if result.error:
        result.error = scrub.scrub_text(result.error)  # every live secret, this trial's too
    write_json_atomic(paths.result, result)
    log.info("trial.done", trial=result.trial_id[:12], task=result.task, attempt=result.attempt,
             reward=result.reward, failure_mode=result.failure_mode.value)
    scrub.unregister(*secrets)
    return result


def classify_agent(result: TrialResult, proxy: ModelProxy | None) -> str:
    """ok | timeout | budget_exceeded | endpoint_error | step_limit | crashed."""
    if result.failure_mode == FailureMode.AGENT_TIMEOUT:
        return "timeout"
    if proxy is not None and proxy.stats.refused_budget:
        return "budget_exceeded"
    if proxy is not None and (proxy.stats.upstream_errors or proxy.stats.upstream_refusals
                              or proxy.stats.abandoned):
        return "endpoint_error"
    if result.agent_exit_code in EXIT_OUTCOMES:  # how an agent orchestra ships says it stopped
        return EXIT_OUTCOMES[result.agent_exit_code]
    if result.agent_exit_code not in (0, None):
        return "crashed"
    return "ok"


def seed_files(ctx: TrialContext, task: Task, box: Sandbox, roots: StateRoots,
               result: TrialResult, handover: dict[str, bytes] | None = None) -> None:
    """The workdir seed (both arms), the state root and TMPDIR, and in memory-on the fact
    files in their places. Their host source paths never appear in the container.
    `handover`: the agent's files (handover_files), copied in the same archive."""
    if (task.path / "workdir").is_dir():
        ctx.runtime.put_archive(box.agent, box.workdir,
                                tar_directory(task.path / "workdir", ".", mode=0o666))
    facts = task.facts if ctx.policy == "memory-on" else ()
    ctx.runtime.put_archive(box.agent, "/",
                            file_seed_archive(roots, box.workdir, facts, extra=handover))
    result.memory.update(state_home=roots.state_home, fact_files_seeded=len(facts))


def active_flags(ctx: TrialContext, task: Task) -> set[str]:
    """The policy flags of this trial: the task's own, plus no_memory when memory-off."""
    active = set(task.config.memory.flags)
    if ctx.policy == "memory-off":
        active.add("no_memory")
    return active


def agent_flags(ctx: TrialContext, task: Task) -> dict[str, str]:
    """The policy flags as the orchestrator's agent receives them (its own names)."""
    return flag_env(ctx.manifest.orchestrator, active_flags(ctx, task))


# ---- agent ---------------------------------------------------------------------------
def handover_files(ctx: TrialContext, task: Task) -> dict[str, bytes]:
    """What the agent is handed in its container: the instruction and the agent's own files."""
    return {INSTRUCTION: task.instruction.encode(), **ctx.agent.files(task)}


def run_agent(ctx: TrialContext, task: Task, box: Sandbox, result: TrialResult,
              handed_over: bool = False) -> None:
    """Hand over the instruction (unless the seed did), run the agent command under
    `timeout -k` and a host watchdog, classify timeout / OOM / disk, and kill the sandbox
    (nothing outlives it)."""
    runtime, container = ctx.runtime, box.agent
    timeout = ctx.timeout_override or task.config.agent.timeout_sec
    if not handed_over:
        files = handover_files(ctx, task)
        runtime.put_archive(container, "/", tar_files({p.lstrip("/"): c for p, c in files.items()}))
    command = ctx.agent.command(task)
    user = task.config.agent.user
    if command is not None and user:  # a non-root agent owns its workdir and logs
        runtime.exec(container, ["chown", "-R", user, box.workdir, AGENT_LOGS, ARTIFACTS])
    if command is not None:
        started = time.time()
        deadline = started + timeout
        command = render_command(command, box.workdir, deadline)
        wrapped = (
            f"if command -v timeout >/dev/null 2>&1; "
            f"then exec timeout -k {KILL_AFTER_SEC} {timeout:g} sh -c {shlex.quote(command)}; "
            f"else exec sh -c {shlex.quote(command)}; fi "
            f">{AGENT_LOGS}/stdout.txt 2>{AGENT_LOGS}/stderr.txt"
        )
        env = {**ctx.manifest.orchestrator.env, **ctx.agent.env(task), **box.exec_env,
               "ORCHESTRA_DEADLINE": str(int(deadline)), "ORCHESTRA_AGENT_ID": ctx.agent_id,
               "ORCHESTRA_ATTEMPT": str(result.attempt),
               **(task.config.solution.env if ctx.agent.name == "oracle" else {})}
        outcome = runtime.exec(container, ["sh", "-c", wrapped], env=env, workdir=box.workdir,
                               user=task.config.agent.user, stop=ctx.cancel,
                               deadline=deadline + KILL_AFTER_SEC + WATCHDOG_GRACE_SEC)
        if ctx.cancel.is_set():
            raise Cancelled()
        elapsed = time.time() - started
        result.agent_exit_code = outcome.exit_code
        if ctx.watchdog.tripped(container):
            result.failure_mode = FailureMode.DISK_LIMIT
            result.error = f"writable layer passed storage_mb={task.config.environment.storage_mb}"
        elif outcome.timed_out or (outcome.exit_code in (124, 137, None) and elapsed >= timeout):
            # Decided by the clock: an agent that exits 124 early did not time out.
            result.failure_mode = FailureMode.AGENT_TIMEOUT
            result.error = f"agent ran past agent.timeout_sec={timeout:g}"
        elif runtime.oom_kills(container) > 0:
            result.failure_mode = FailureMode.OOM
            result.error = f"out of memory at memory_mb={task.config.environment.memory_mb}"
    abnormal = result.failure_mode in (FailureMode.AGENT_TIMEOUT, FailureMode.OOM,
                                       FailureMode.DISK_LIMIT)
    if task.config.verifier.environment_mode != "shared" or abnormal:
        # kill, not stop: no 10 s wait, no process survives the deadline. Harbor's shared
        # mode grades the live container after an agent that ended by itself: services it
        # started keep running for test.sh. After a timeout, an OOM or a disk breach the
        # container is killed and restarted for grading (files kept, processes gone).
        runtime.kill(container)
