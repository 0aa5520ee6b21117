"""`orchestra run --baseline JOB_DIR`: the baseline read before any trial runs.

A bad baseline is refused then (exit 2), and so is one the gate could compare nothing
with; it gives `-k auto` its attempts and the scheduler its durations. The gate's verdict
on the finished job is runs.py's `_judge` (report/gate.py decides).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.api.say import Say, silent

if TYPE_CHECKING:
    from orchestrator.api.runs import RunRequest
    from orchestrator.job import JobOptions
    from orchestrator.models import TrialResult
    from orchestrator.tasks import Task


def gate_names(a: RunRequest) -> tuple[str, str]:
    """The two jobs as the gate's messages name them."""
    return f"job {a.jobs_dir / (a.job_name or '')}", f"job {a.baseline}"


def read_baseline(a: RunRequest, options: JobOptions, tasks: list[Task],
                  note: Say = silent) -> list[TrialResult] | None:
    """The baseline, read now: a bad one is refused before any trial runs, and so is one the
    gate could compare nothing with (no task in common by name or content hash, none of
    gate_layer's, none graded there) or whose tasks changed (without allow_changed).
    It also gives -k auto its attempts and the scheduler its durations (longest first)."""
    if a.baseline is None:
        return None
    from orchestrator.job import measured
    from orchestrator.report import TaskKey, check_comparable, check_options, load_trials

    baseline_trials = load_trials(a.baseline)
    check_options(a.flaky, a.alpha)
    here = {t.name: TaskKey(frozenset({t.content_hash}), t.config.metadata.evaluation_layer) for t in tasks}
    check_comparable(here, baseline_trials, gate_names(a), a.allow_changed, a.gate_layer)
    if a.k is not None and str(a.k) == "auto":
        options.k = _auto_k(baseline_trials, a.detect_drop, a.alpha, a.gate_layer, note)
    options.durations = measured(baseline_trials)
    return baseline_trials


def _auto_k(baseline_trials: list[TrialResult], drop: float, alpha: float, gate_layer: str | None,
            say: Say = silent) -> int:
    """-k auto: attempts enough to tell a drop of `drop` from chance against the baseline,
    said with what they cannot tell: tasks the baseline ran too few times for any k (run
    with the baseline's own attempts), and tasks left to the one-attempt rule at k=1."""
    from orchestrator.report import attempts_to_tell

    if gate_layer is not None:
        baseline_trials = [t for t in baseline_trials if t.layer == gate_layer]
    plan = attempts_to_tell(baseline_trials, drop, alpha)
    told = [t for t in plan.tasks if t.k is not None]
    say(f"-k auto: k={plan.k} against the baseline's attempts (it ran each task up to "
        f"{plan.baseline_k} time(s)); {len(told)} of {len(plan.tasks)} task(s) it passed can tell a "
        f"drop of {drop:g} in pass rate from chance with 80% power at alpha {alpha:g}")
    if cannot := plan.cannot:
        shown = ", ".join(f"{t.task} ({t.baseline} in the baseline)" for t in cannot[:5])
        need = (f"rerun the baseline with -k {plan.baseline_k_needed} (and this job with as many) to tell it"
                if plan.baseline_k_needed else f"no k up to {plan.most} on both sides tells it")
        say(f"-k auto: no k up to {plan.most} can tell it for {len(cannot)} task(s) the baseline ran "
            f"too few times ({shown}{', ...' if len(cannot) > 5 else ''}): they run with the "
            f"baseline's own attempts and the gate cannot promise to catch that drop; {need}")
    if plan.one_attempt:
        say(f"-k auto: k=1 against {len(plan.one_attempt)} task(s) the baseline ran once: they are "
            "judged by the one-attempt rule (passed there, failed now), which cannot tell a "
            "regression from chance: a task that passes 90% of the time fails the gate 1 time in 10")
    return plan.k
