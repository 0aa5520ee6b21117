"""The agent phase's parts: what is seeded and handed over, the agent command run under
`timeout -k` and the host's watchdog, and how its ending is classified (timeout, OOM,
disk, the agent's own exit)."""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING

from orchestrator.agents import (
    EXIT_OUTCOMES,
    KILL_AFTER_SEC,
    AgentRun,
    Conversing,
    render_command,
    under_timeout,
)
from orchestrator.archive import tar_directory, tar_files
from orchestrator.models import (
    AGENT_KILLED,
    FailureMode,
    TrialResult,
    agent_ended,
    flag_env,
    wiring_in,
)
from orchestrator.paths import AGENT_LOGS, ARTIFACTS, INSTRUCTION
from orchestrator.tasks import StateRoots, Task, file_seed_archive
from orchestrator.trial.context import Cancelled, TrialContext
from orchestrator.trial.sandbox import Sandbox

if TYPE_CHECKING:
    from orchestrator.services import ModelProxy

WATCHDOG_GRACE_SEC = 3  # the host kills the container this long after that


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
    result.memory.state_home, result.memory.fact_files_seeded = roots.state_home, len(facts)


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
        solution_env = task.config.solution.env if ctx.agent.name == "oracle" else {}
        if dropped := wiring_in(solution_env):  # the dataset's: never orchestra's wiring
            note = f"task.toml: [solution] env: sets orchestra's wiring variables {', '.join(dropped)}: dropped"
            result.host_env_notes += [note] if note not in result.host_env_notes else []
        env = {**ctx.manifest.orchestrator.env, **ctx.agent.env(task), **box.exec_env,
               "ORCHESTRA_DEADLINE": str(int(deadline)), "ORCHESTRA_AGENT_ID": ctx.agent_id,
               "ORCHESTRA_ATTEMPT": str(result.attempt),
               **{k: v for k, v in solution_env.items() if k not in dropped}}
        # the image's own ENV may set wiring orchestra does not set in this trial: unset it
        to_unset = [name for name in box.image_wiring if name not in env]
        if to_unset:
            command = shlex.join(["unset", *to_unset]) + "; " + command  # names from wiring_in only
        wrapped = (f"{under_timeout(f'sh -c {shlex.quote(command)}', timeout)} "
                   f">{AGENT_LOGS}/stdout.txt 2>{AGENT_LOGS}/stderr.txt")
        if isinstance(ctx.agent, Conversing):  # the host talks to it over its stdio (acp)
            outcome = ctx.agent.converse(AgentRun(runtime, container, command, env, box.workdir, user,
                                                  timeout, deadline, ctx.cancel, task))
        else:
            outcome = runtime.exec(container, ["sh", "-c", wrapped], env=env, workdir=box.workdir,
                                   user=task.config.agent.user, stop=ctx.cancel,
                                   deadline=deadline + KILL_AFTER_SEC + WATCHDOG_GRACE_SEC)
        if ctx.cancel.is_set():
            raise Cancelled()
        elapsed = time.time() - started
        result.agent_exit_code = outcome.exit_code
        ended = agent_ended(disk_tripped=ctx.watchdog.tripped(container), timed_out=outcome.timed_out,
                            exit_code=outcome.exit_code, elapsed=elapsed, timeout=timeout,
                            oom_killed=lambda: runtime.oom_kills(container) > 0,
                            storage_mb=task.config.environment.storage_mb,
                            memory_mb=task.config.environment.memory_mb)
        if ended is not None:
            ended.onto(result)
    abnormal = result.failure_mode in AGENT_KILLED
    if task.config.verifier.environment_mode != "shared" or abnormal:
        # kill, not stop: no 10 s wait, no process survives the deadline. Harbor's shared
        # mode grades the live container after an agent that ended by itself: services it
        # started keep running for test.sh. After a timeout, an OOM or a disk breach the
        # container is killed and restarted for grading (files kept, processes gone).
        runtime.kill(container)
