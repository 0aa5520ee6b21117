"""Harbor's multi-step tasks (`[[steps]]`): the steps in turn in one environment.

lifecycle.py opens the sandbox and hands over `episode(view, folder, last)`, which runs one
instruction from agent to grade; this module prepares each step, calls it, applies
Harbor's min_reward early stop and derives the trial's reward from the steps'.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.archive import tar_directory
from orchestrator.log import get_logger
from orchestrator.models import (
    FailureMode,
    StepResult,
    StepSection,
    TrialResult,
    setup_failure,
    steps_outcome,
)
from orchestrator.paths import AGENT_LOGS, TrialDir
from orchestrator.runtime import Runtime
from orchestrator.tasks import Task
from orchestrator.trial.sandbox import Sandbox, Unhealthy, wait_healthy

log = get_logger()


class StepSetupFailed(Exception):
    pass


def run_steps(runtime: Runtime, task: Task, box: Sandbox, paths: TrialDir,
              result: TrialResult, episode: Callable[[Task, TrialDir, bool], None]) -> None:
    """Each step in turn in the same environment: its workdir/ uploaded and setup.sh run,
    its healthcheck, then its agent, collect and verify (results under steps/<name>/).
    A step below its min_reward (or without a reward) stops the rest, as Harbor does; the
    trial's reward is the per-key mean over graded steps, or the final step's."""
    steps = task.config.steps or []
    for index, step in enumerate(steps):
        view = task.step_view(step)
        started = time.monotonic()
        result.failure_mode, result.error, result.reward = FailureMode.NONE, None, None
        record = StepResult(name=step.name)
        try:
            _prepare_step(runtime, view, box, step)
            episode(view, TrialDir(paths.root / "steps" / step.name), index == len(steps) - 1)
        except (StepSetupFailed, Unhealthy) as exc:
            setup_failure(exc).onto(result)
        record.reward, record.failure_mode, record.error = result.reward, result.failure_mode, result.error
        record.agent_exit_code, record.seconds = result.agent_exit_code, round(time.monotonic() - started, 3)
        result.steps.append(record)
        stop = _step_stops(step.min_reward, record.reward)
        if stop is not None and index < len(steps) - 1:
            record.stopped = stop
            log.info("trial.steps_stopped", trial=result.trial_id[:12], step=step.name, why=stop)
            break
    graded = [r.reward for r in result.steps if r.reward is not None]
    if task.config.multi_step_reward_strategy == "final":
        result.reward = result.steps[-1].reward
    else:
        keys = sorted({k for reward in graded for k in reward})
        result.reward = {k: round(sum(r.get(k, 0.0) for r in graded) / len(graded), 6)
                         for k in keys} if graded else None
    result.failure_mode = steps_outcome(result.reward is not None, [r.failure_mode for r in result.steps])
    result.error = "; ".join(f"step {r.name}: {r.error}" for r in result.steps if r.error) or None


def _step_stops(min_reward: float | dict[str, float] | None, reward: dict[str, float] | None) -> str | None:
    """Harbor's min_reward: a float gates `reward`, a map gates each key; a missing reward
    or key counts as -inf. Returns why the remaining steps stop, or None."""
    if min_reward is None:
        return None if reward is not None else "no reward"
    thresholds = {"reward": min_reward} if isinstance(min_reward, int | float) else min_reward
    for key, threshold in thresholds.items():
        actual = (reward or {}).get(key, float("-inf"))
        if actual < threshold:
            return f"{key}={actual} below min_reward {threshold}"
    return None


def _prepare_step(runtime: Runtime, view: Task, box: Sandbox, step: StepSection) -> None:
    """A step's fresh /logs/agent, its workdir/ (and setup.sh), its healthcheck."""
    container = box.agent
    runtime.exec(container, ["sh", "-c", f"rm -rf {AGENT_LOGS} && mkdir -p {AGENT_LOGS} "
                                         f"&& chmod 777 {AGENT_LOGS}"])
    seed = view.workdir_seed
    if seed is not None and seed.is_dir():
        runtime.put_archive(container, box.workdir, tar_directory(seed, ".", mode=0o666))
        if (seed / "setup.sh").is_file():
            outcome = runtime.exec(container, ["bash", f"{box.workdir}/setup.sh"],
                                   deadline=time.time() + 300, workdir=box.workdir)
            if outcome.exit_code != 0:
                raise StepSetupFailed(f"setup.sh exited with {outcome.exit_code}")
    if step.healthcheck is not None:
        wait_healthy(runtime, box, step.healthcheck)
