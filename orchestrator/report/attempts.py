"""`-k auto`: how many attempts a job needs for the regression gate (report/gate.py) to tell
a given drop in a task's pass rate from its baseline, with a given power at a given alpha,
under the gate's own rule (its exact test; the one-attempt rule only at 1 against 1)."""

from __future__ import annotations

import math
from collections import defaultdict

from pydantic import BaseModel, Field

from orchestrator.models import TrialResult
from orchestrator.report.gate import Counts, counts_of, one_sided_p


class TaskAttempts(BaseModel):
    """-k auto, one baseline task: its counts and the attempts that tell the drop (None: no
    k up to the most tried)."""

    task: str
    baseline: Counts
    k: int | None


class AttemptsPlan(BaseModel):
    """`-k auto`'s answer: the attempts to run, and what they can and cannot tell."""

    k: int
    drop: float
    alpha: float
    power: float
    most: int
    baseline_k: int                     # the most graded attempts any baseline task had
    tasks: list[TaskAttempts] = Field(default_factory=list)
    one_attempt: list[str] = Field(default_factory=list)  # judged by the one-attempt rule at k
    baseline_k_needed: int | None = None  # attempts on both sides that would tell it

    @property
    def cannot(self) -> list[TaskAttempts]:
        return [t for t in self.tasks if t.k is None]


def attempts_to_tell(baseline: list[TrialResult], drop: float, alpha: float = 0.05,
                     power: float = 0.8, most: int = 20) -> AttemptsPlan:
    """`-k auto`: the smallest k (at most `most`) with which a drop of `drop` in a task's
    pass rate from its baseline rate is detected with the given power at `alpha` under the
    gate's rule, over every task the baseline graded and passed at least once. The tasks no
    k up to `most` can tell (too few baseline attempts: against one, the exact test needs
    19 failures in a row to reach 0.05) are named, and run with the baseline's own
    attempts; the baseline attempts (on both sides) that would tell the drop are given."""
    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for t in baseline:
        by_task[t.task].append(t)
    counts = {task: counts_of(trials) for task, trials in sorted(by_task.items())}
    plan = AttemptsPlan(k=1, drop=drop, alpha=alpha, power=power, most=most,
                        baseline_k=max((c.graded for c in counts.values()), default=0))
    for task, c in counts.items():
        if c.passed == 0:  # never passed there: it cannot regress
            continue
        k = next((k for k in range(1, most + 1) if _power(k, c.passed, c.graded, drop, alpha) >= power), None)
        plan.tasks.append(TaskAttempts(task=task, baseline=c, k=k))
    told = [t.k for t in plan.tasks if t.k is not None]
    plan.k = max([1, *told, *(t.baseline.graded for t in plan.cannot)])
    plan.one_attempt = [t.task for t in plan.tasks if plan.k == 1 and t.baseline.graded == 1]
    if plan.cannot:
        plan.baseline_k_needed = next((n for n in range(2, most + 1)
                                       if _power(n, n, n, drop, alpha) >= power), None)
    return plan


def _power(k: int, b: int, nb: int, drop: float, alpha: float) -> float:
    """Chance that k attempts at the baseline rate minus `drop` gate under the gate's rule
    (the exact test alone, as for one task; the one-attempt rule only at 1 against 1)."""
    rate = max(0.0, b / nb - drop)
    chance = 0.0
    for a in range(k + 1):
        if k == 1 and nb == 1:
            fires = b == 1 and a == 0
        else:
            fires = a / k < b / nb and one_sided_p(a, k, b, nb) <= alpha
        if fires:
            chance += math.comb(k, a) * rate ** a * (1 - rate) ** (k - a)
    return chance
