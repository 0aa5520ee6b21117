"""One trial, phase by phase (DESIGN 2): build, start, seed, agent, collect, verify, cleanup.

This file reads top to bottom like the lifecycle: the Trial class's template method and its
steps. What every trial shares and the phase bracket are in context.py, the agent phase's
parts in agent.py. It never builds engine API requests (runtime/), never parses task files
(tasks/) and never formats output (report/).
"""

from __future__ import annotations

import os
import time
import traceback
from typing import TYPE_CHECKING

from orchestrator import scrub
from orchestrator.log import get_logger
from orchestrator.models import (
    JOB_CANCELLED,
    FailureMode,
    RelayRecord,
    TrialResult,
    answer_leak,
    cancelled_in_phase,
    endpoint_failed,
    failure_of,
    is_host_disk_full,
    wiring_in,
)
from orchestrator.paths import AGENT_LOGS, TrialDir
from orchestrator.runtime import BuildFailed, Network
from orchestrator.scrub import scrub_tree
from orchestrator.services import RECORD, replay_key
from orchestrator.tasks import (
    HostEnv,
    StateRoots,
    Task,
    allow_host_env,
    allowed_host_env,
    seed_engrams,
)
from orchestrator.trial.agent import (
    active_flags,
    agent_flags,
    classify_agent,
    handover_files,
    run_agent,
    seed_files,
)
from orchestrator.trial.atif import write_trial_atif
from orchestrator.trial.audit import audit_trajectory, grading_files
from orchestrator.trial.bases import BaseBuildFailed
from orchestrator.trial.collect import EVIDENCE_NAME, collect, export_evidence
from orchestrator.trial.context import (
    Cancelled,
    TrialContext,
    new_result,
    phase,
    trial_dir,
    trial_id,
)
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
from orchestrator.trial.verify import resolve_env, verify
from orchestrator.trial.workers import start_workers, stop_workers
from orchestrator.util import write_json_atomic

if TYPE_CHECKING:  # imported where a trial needs them: a model proxy, a relay, an egress proxy
    from orchestrator.services import EgressProxy, ModelProxy, TrialRelay

log = get_logger()

def run_trial(ctx: TrialContext, task: Task, attempt: int,
              retries: list[str] | None = None) -> TrialResult:
    """One trial of `task`, start to written result (never raises for what a trial can
    fail of; the host's disk filling up does raise, after the trial is written)."""
    return Trial(ctx, task, attempt, retries).run()


class Trial:
    """One trial as a template method: `run` = prepare (build, start, seed), the episodes
    (one, or one per step of a multi-step task), record (an answer leak voids the reward),
    and finalize (services stopped, sandbox removed, result.json written), with whatever
    went wrong classified on the way (`_failed`). The trial's sandbox and the services it
    started on the host (relay, model proxy, egress proxy) are its attributes."""

    def __init__(self, ctx: TrialContext, task: Task, attempt: int,
                 retries: list[str] | None = None):
        self.ctx, self.task = ctx, task
        self.tid = trial_id(ctx.job, task, ctx.agent_id, attempt)
        self.paths = trial_dir(ctx, task, self.tid)
        self.result = new_result(ctx, task, attempt, self.tid)
        self.result.retries = list(retries or [])
        self.box: Sandbox | None = None
        self.secrets: list[str] = []
        self.host_values: list[str] = []  # what the dataset read from the host (--task-env)
        self.relay: TrialRelay | None = None
        self.proxy: ModelProxy | None = None
        self.egress: EgressProxy | None = None
        self.roots = StateRoots.fresh()
        # a one-instruction task's hand-over travels with the seed: one copy into the container
        self.handed_over = not task.config.steps

    def run(self) -> TrialResult:
        self.paths.set_aside_earlier_try()  # every run starts from an empty folder
        try:
            self.prepare()
            if self.task.config.steps:
                run_steps(self.ctx.runtime, self.task, self.sandbox, self.paths, self.result, self.episode)
            else:
                self.episode(self.task, self.paths, last=True)
            self.record()
        except Cancelled:
            JOB_CANCELLED.onto(self.result)
        except BuildFailed as exc:
            failure_of(exc, cancelled=False, own_disk_full=lambda: False).onto(self.result)
            if isinstance(exc, BaseBuildFailed):  # which FROM, on what stand-in, or the failed pull
                self.result.build_failure, self.result.bases = exc.failure, [*self.result.bases, *exc.bases]
        except Exception as exc:  # the engine failed, or orchestra did: never lose the result
            self._failed(exc)
        return self.finalize()

    @property
    def sandbox(self) -> Sandbox:
        assert self.box is not None, "the sandbox is open from the start phase on"
        return self.box

    # ---- prepare: build, start, seed ----------------------------------------------------
    def prepare(self) -> None:
        ctx, task, result = self.ctx, self.task, self.result
        self.host_env()
        with phase(result, "build", ctx):
            self.images = images = ctx.images_for(task)
            result.image, result.base_alias = images.agent_image, images.base_alias
            result.stand_ins = [s.record() for s in images.stand_ins]
            result.image_source = images.source
            result.image_pulled_from = list(images.pulled)
            result.bases = list(images.bases)
        with phase(result, "start", ctx):
            workdir = resolve_workdir(ctx.runtime, task, images.agent_image)
            dataset_env = self.without_wiring(task.config.environment.env, "task.toml: [environment] env")
            env = {**dataset_env, **agent_flags(ctx, task), **self.roots.env(workdir)}
            self.box = box = open_sandbox(ctx.runtime, ctx.networks, task, images.agent_image, ctx.job,
                                          self.tid, env=env, workdir=workdir, services=self.start_services,
                                          oci_runtime=ctx.oci_runtime, binds=ctx.agent.binds(),
                                          trust=ctx.trust)
            box.egress, result.compose_services = self.egress, sorted(box.sidecars)
            box.image_wiring = wiring_in(ctx.runtime.image_facts(images.agent_image).env)
            if box.image_wiring:
                self.note(f"the task image's ENV sets orchestra's wiring variables {', '.join(box.image_wiring)}: "
                          "unset for the agent (where orchestra sets one, its value)")
            box.allowed_hosts = {p: task.config.allowed_hosts_for(p) for p in ("agent", "verifier")}
            result.limits = applied_limits(ctx.runtime, box, task)
            require_runtime(ctx.runtime, box, box.agent, "agent", result.limits.oci_runtime)
            ctx.watchdog.register(box.agent, task.config.environment.storage_mb)
            if task.config.environment.healthcheck is not None:
                result.healthchecks = wait_healthy(ctx.runtime, box, task.config.environment.healthcheck)
        with phase(result, "seed", ctx):
            seed_files(ctx, task, box, self.roots, result,
                       handover=handover_files(ctx, task) if self.handed_over else None)
            if ctx.policy == "memory-on" and task.seeds:
                records = seed_engrams(ctx.runtime, box.agent, task.seeds,
                                       user=task.config.agent.user, env=box.exec_env)
                result.memory.engram_seeds = records

    def host_env(self) -> None:
        """What the dataset read from the host (compose, verifier.env: only names the run
        allows) is a secret of this trial, scrubbed from every file it writes; what it
        asked for and did not get is said in the result."""
        task = self.task
        notes = list(task.compose.notes) if task.compose else []
        values = list(task.compose.host_values.values()) if task.compose else []
        if self.ctx.manifest.sandbox.task_env and not allowed_host_env():  # a Ray node
            allow_host_env(self.ctx.manifest.sandbox.task_env)
        host = HostEnv(where="task.toml: ")
        for env in [task.config.verifier.env, *(s.verifier.env for s in task.config.steps or [])]:
            resolve_env(env, host)
        values += [v for v in host.values.values() if v not in values]
        self.result.host_env_notes = notes + [n for n in host.notes if n not in notes]
        self.host_values = values
        scrub.register(*values)

    def without_wiring(self, env: dict[str, str], where: str) -> dict[str, str]:
        """A dataset's environment less orchestra's wiring variables (models/wiring.py),
        each dropped said once in the result's host_env_notes."""
        dropped = wiring_in(env)
        if dropped:
            self.note(f"{where}: sets orchestra's wiring variables {', '.join(dropped)}: dropped")
        return {k: v for k, v in env.items() if k not in dropped}

    def note(self, text: str) -> None:
        if text not in self.result.host_env_notes:
            self.result.host_env_notes.append(text)

    def start_services(self, network: Network) -> dict[str, str]:
        """The relay, the model proxy and (under an allowlist) the egress proxy, on the
        trial network's gateway: the environment that tells the agent where they are."""
        ctx, task = self.ctx, self.task
        env: dict[str, str] = {}
        if task.config.network_for("agent") == "allowlist":
            from orchestrator.services import EgressProxy

            self.egress = EgressProxy(network.gateway, task.config.allowed_hosts_for("agent")).start()
            env.update(self.egress.env(direct=[network.gateway]))
        if task.uses_relay:
            from orchestrator.services import start_relay

            self.relay = relay = start_relay(task, ctx.manifest, network.gateway, self.tid, ctx.job)
            self.result.relay = RelayRecord(start_sec=round(relay.started_sec, 4))
            env.update(relay.env_for(relay.lead))
            self.secrets.extend(relay.secrets())
        lead = ctx.manifest.orchestrator
        if lead.endpoint and ctx.upstreams is not None:
            from orchestrator.services import ModelProxy

            upstream = ctx.upstreams.by_name[lead.endpoint]
            timeout = ctx.timeout_override or task.config.agent.timeout_sec
            self.proxy = proxy = ModelProxy.for_upstream(
                network.gateway, upstream, lead.budget, ctx.manifest.prices,
                time.time() + timeout + 60, record=self.paths.root / RECORD,
                trial=replay_key(task.name, self.result.attempt))
            env.update({**upstream.env, **proxy.env()})
            self.secrets.append(proxy.token)
        scrub.register(*self.secrets)
        return env

    # ---- one episode: agent, collect, verify --------------------------------------------
    def episode(self, view: Task, where: TrialDir, last: bool) -> None:
        """One instruction, start to grade: agent, collect, verify (a multi-step task runs
        one per step in the same environment; `where` is that step's folder)."""
        ctx, result, box, relay = self.ctx, self.result, self.sandbox, self.relay
        with phase(result, "agent", ctx):
            if relay is not None and relay.task_event_id is None:
                relay.post_instruction()
            deadline = time.time() + (ctx.timeout_override or view.config.agent.timeout_sec)
            workers = start_workers(ctx, view, box, relay, self.images.agent_image, deadline,
                                    flags=active_flags(ctx, view))
            try:
                run_agent(ctx, view, box, result, handed_over=self.handed_over)
            finally:
                if workers:
                    result.workers = stop_workers(ctx.runtime, workers, where, ctx.watchdog)
        with phase(result, "collect", ctx):
            self.collect(view, where, last)
        with phase(result, "verify", ctx):
            verify(ctx.runtime, view, self.images, box, where, result,
                   evidence=where.artifacts / EVIDENCE_NAME if relay is not None and last else None,
                   watchdog=ctx.watchdog, keep_alive=not last)

    def collect(self, view: Task, where: TrialDir, last: bool) -> None:
        """Copy out the evidence, derive the trajectory, scrub secrets, audit memory use."""
        ctx, result, box = self.ctx, self.result, self.sandbox
        collect(ctx.runtime, view, box, where)
        result.collected = dict(box.collected)
        if self.relay is not None and last:
            export_evidence(self.relay, where, result)
        derived = ctx.agent.finish(where.agent, self.paths.root / RECORD)  # its trajectory
        write_trial_atif(ctx, view, where.agent, self.paths.root / RECORD, result)  # and in ATIF
        scrubbed = scrub_tree(where.root, scrub.current())  # the trial's own included
        if scrubbed:  # the agent wrote a secret somewhere: replaced, and said so
            result.scrubbed_files = (result.scrubbed_files + scrubbed)[:50]
        audit = audit_trajectory(
            where.agent / "trajectory.jsonl", view.facts, view.config.memory.markers,
            view.config.memory.markers_in_prefix, state_home=self.roots.state_home,
            truncated=AGENT_LOGS in result.collected and result.collected[AGENT_LOGS].truncated,
            grading=grading_files(view.path, with_memory=ctx.policy != "memory-on"))
        if derived:
            audit.mark_incomplete(derived)
        audit.record_into(result.memory)

    # ---- record, classify, finalize -----------------------------------------------------
    def record(self) -> None:
        """An answer leak voids the reward: counted as failed everywhere, listed as void."""
        result = self.result
        if result.memory.leaks:
            answer_leak(result.memory.leaks).onto(result)
            result.voided_reward, result.reward = result.reward, None

    def _failed(self, exc: Exception) -> None:
        """What an exception in a phase makes of the trial. The host's disk full is raised
        on (the job stops), after the trial is finalized."""
        result, task = self.result, self.task
        failure = failure_of(exc, cancelled=self.ctx.cancel.is_set(),
                             own_disk_full=lambda: isinstance(exc, OSError)
                             and _own_disk_full(self.ctx, self.box, exc),  # the agent filled its own
                             storage_mb=task.config.environment.storage_mb)
        failure.onto(result)
        if failure.mode in (FailureMode.DISK_LIMIT, FailureMode.CANCELLED):
            return
        if is_host_disk_full(exc):
            try:  # the job stops (scheduler), after this trial's sandbox is removed
                self.finalize()
            except OSError:
                pass
            raise exc
        log.error("trial.error", trial=self.tid[:12], task=task.name, error=result.error,
                  traceback=traceback.format_exc(limit=8))

    def finalize(self) -> TrialResult:
        """Stop the trial's services, remove its sandbox, write result.json (always), then
        forget the trial's secrets (until then every log event is scrubbed of them)."""
        ctx, result, proxy, relay, egress, box = (self.ctx, self.result, self.proxy, self.relay,
                                                  self.egress, self.box)
        interrupted = cancelled_in_phase(result.failure_mode, result.error, result.reward is not None)
        if ctx.cancel.is_set() and interrupted is not None:  # cancelled in whatever phase: resumable
            interrupted.onto(result)
        if proxy is not None:
            proxy.stop()
            result.tokens = proxy.stats.prompt_tokens + proxy.stats.completion_tokens
            result.cost = round(proxy.stats.cost, 6)
            result.model = proxy.summary()
            result.agent_outcome = classify_agent(result, proxy)
            stats = proxy.stats
            # an abandoned call the agent went on from (a later call answered) is not the trial's end
            endpoint = endpoint_failed(result.failure_mode, result.headline, upstream_errors=stats.upstream_errors,
                                       abandoned=stats.abandoned if stats.last_abandoned else 0,
                                       last_error=stats.last_error)
            if endpoint is not None:  # the provider failed, not the agent: retried, never graded
                endpoint.onto(result)
                if result.reward is not None:  # what test.sh said is kept, as void, not counted
                    result.voided_reward, result.reward = result.reward, None
        elif result.agent_outcome is None and result.agent_exit_code is not None:
            result.agent_outcome = classify_agent(result, None)
        if relay is not None:
            result.relay = result.relay or RelayRecord()  # made when the relay started
            relay.server.record_bounds(result.relay)
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
        write_json_atomic(self.paths.result, result)
        # the verifier's output and the result too (test.sh may print what the dataset read)
        if scrubbed := scrub_tree(self.paths.root, scrub.current()):
            result.scrubbed_files = sorted(set(result.scrubbed_files) | set(scrubbed))[:50]
            write_json_atomic(self.paths.result, result)
        log.info("trial.done", trial=result.trial_id[:12], task=result.task, attempt=result.attempt,
                 reward=result.reward, failure_mode=result.failure_mode.value)
        scrub.unregister(*self.secrets, *self.host_values)
        return result


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


