"""The regression gate for release pipelines: this job against a baseline job.

Which tasks gate: every task both jobs ran (the default; Harbor datasets carry no layers),
or only those of one `[metadata] evaluation_layer` (`gate_layer`). Both jobs must have run
the same content for a task (its content hash), else the comparison would mix versions:
refused unless allow_changed.

Per task, each side is counted as passes out of graded attempts. An attempt passes when it
ended with failure mode `none` and a headline reward >= 1; a voided attempt (answer leak),
a timeout, an OOM and a verifier error count as failed; attempts the machinery lost
(infra, launch, build, endpoint errors, cancelled, infeasible) are not graded and are
left out of the counts (a task the baseline passed with no graded attempt now gates:
nothing shows the contract still holds).

The rule, honest about chance:
- k = 1 on either side: one attempt cannot tell a regression from chance, so the plain
  rule applies (passed in every baseline attempt, failed in one now) and the verdict says
  one attempt cannot tell.
- otherwise Fisher's exact test, one-sided (the pass rate now is lower than there), per
  task, and Benjamini-Hochberg over the tasks that could regress at all: a task whose
  counts could never reach p <= alpha (5/5 -> 5/5, 4/5 -> 4/5) cannot be a false alarm and
  is not counted (Gilbert 2005, "A modified false discovery rate multiple-comparisons
  procedure for discrete data", after Tarone 1990). So the expected share of false alarms
  among the regressions named stays at alpha, one broken task among a hundred that pass
  is tested at alpha itself, and thirty broken at once are all named (a family-wise
  correction would name none of them at k = 5, where the smallest p is 1/252).
- a task flaky in the baseline itself (some passes, some fails) is reported as flaky and
  gates only with flaky="gate"; flaky="ignore" leaves it out altogether.
Improvements are the same test the other way round; they never gate.

The exact test is ten lines of integer arithmetic (math.comb): scipy would add ~100 MB of
install to compute one hypergeometric tail.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from orchestrator.errors import InputError
from orchestrator.models.result import FailureMode, TrialResult

NOT_GRADED = {FailureMode.INFRA_ERROR, FailureMode.LAUNCH_ERROR, FailureMode.BUILD_ERROR,
              FailureMode.ENDPOINT_ERROR, FailureMode.CANCELLED, FailureMode.INFEASIBLE}
FLAKY_POLICIES = ("gate", "report", "ignore")
ONE_ATTEMPT = "k=1: one attempt cannot tell a regression from chance"


def passed(trial: TrialResult) -> bool:
    """The gate's one rule for an attempt that passed."""
    return trial.failure_mode == FailureMode.NONE and trial.headline >= 1.0


def one_sided_p(passes_now: int, n_now: int, passes_before: int, n_before: int) -> float:
    """Fisher's exact test: P(passes now <= observed) given both sides' sizes and the total
    passes (the hypergeometric lower tail). Small when the rate dropped by more than chance."""
    total, n = passes_now + passes_before, n_now + n_before
    lowest = max(0, total - n_before)
    tail = sum(math.comb(n_now, x) * math.comb(n_before, total - x)
               for x in range(lowest, passes_now + 1))
    return tail / math.comb(n, total)


def smallest_p(passes_now: int, n_now: int, passes_before: int, n_before: int) -> float:
    """The smallest p-value these margins could give (all the passes on the baseline side)."""
    total = passes_now + passes_before
    lowest = max(0, total - n_before)
    return one_sided_p(lowest, n_now, total - lowest, n_before)


@dataclass
class TaskVerdict:
    task: str
    layer: str
    before: tuple[int, int]  # passes, graded attempts in the baseline
    after: tuple[int, int]   # ... in this job
    verdict: str  # regressed | improved | flaky | dropped | same | ungraded
    gates: bool = False
    p_value: float | None = None
    note: str = ""

    def line(self) -> str:
        (b, nb), (a, na) = self.before, self.after
        parts = [f"{self.task}  {b}/{nb} -> {a}/{na}"]
        if self.p_value is not None:
            parts.append(f"p={self.p_value:.3g}")
        if self.note:
            parts.append(f"({self.note})")
        return "  ".join(parts)

    def as_dict(self) -> dict:
        return {"task": self.task, "layer": self.layer, "verdict": self.verdict, "gates": self.gates,
                "baseline": {"passed": self.before[0], "graded": self.before[1]},
                "now": {"passed": self.after[0], "graded": self.after[1]},
                "p_value": self.p_value, "note": self.note}


@dataclass
class Gate:
    rule: str = ""
    alpha: float = 0.05
    flaky: str = "report"
    gate_layer: str | None = None
    threshold: float | None = None  # the per-task p-value at or below which a task regressed
    testable: int = 0               # m: tasks that could have regressed
    verdicts: list[TaskVerdict] = field(default_factory=list)
    only_here: list[str] = field(default_factory=list)
    only_baseline: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def of(self, verdict: str) -> list[TaskVerdict]:
        return [v for v in self.verdicts if v.verdict == verdict]

    @property
    def failed(self) -> bool:
        """Whether --fail-on-regression exits 1."""
        return any(v.gates for v in self.verdicts)

    @property
    def regressions(self) -> dict[str, list[str]]:  # layer -> tasks that gate
        found: dict[str, list[str]] = {}
        for v in self.verdicts:
            if v.gates:
                found.setdefault(v.layer, []).append(v.task)
        return found

    def as_dict(self) -> dict:
        return {"rule": self.rule, "alpha": self.alpha, "flaky": self.flaky,
                "gate_layer": self.gate_layer, "threshold": self.threshold,
                "testable_tasks": self.testable, "failed": self.failed,
                "regressions": self.regressions,
                "improvements": {v.layer: [w.task for w in self.of("improved") if w.layer == v.layer]
                                 for v in self.of("improved")},
                "tasks": [v.as_dict() for v in self.verdicts],
                "only_here": self.only_here, "only_baseline": self.only_baseline,
                "changed": self.changed}

    def lines(self) -> list[str]:
        """What the gate found, one line each, for the terminal and the CI log."""
        out = [f"gate: {self.rule}"]
        labels = (("regressed", "regressed"), ("ungraded", "not graded now"),
                  ("flaky", "flaky in the baseline"), ("dropped", "dropped within chance"),
                  ("improved", "improved"))
        for verdict, label in labels:
            for v in self.of(verdict):
                tag = "" if verdict != "flaky" else (" [gates]" if v.gates else " [not gated]")
                out.append(f"{label} ({_layer_name(v.layer)}): {v.line()}{tag}")
        if self.only_baseline:
            out.append(f"not run here (in the baseline only): {', '.join(self.only_baseline)}")
        return out


def _layer_name(layer: str) -> str:
    return "no layer" if layer == "-" else f"{layer} layer"


def _counts(trials: list[TrialResult]) -> tuple[int, int]:
    graded = [t for t in trials if t.failure_mode not in NOT_GRADED]
    return sum(passed(t) for t in graded), len(graded)


def check_options(flaky: str, alpha: float) -> None:
    problems = []
    if flaky not in FLAKY_POLICIES:
        problems.append(f"--flaky: {flaky!r} is not one of {', '.join(FLAKY_POLICIES)}")
    if not 0 < alpha < 1:
        problems.append(f"--alpha: {alpha:g} is not between 0 and 1")
    if problems:
        raise InputError(problems)


def gate(now: list[TrialResult], baseline: list[TrialResult], allow_changed: bool = False,
         gate_layer: str | None = None, flaky: str = "report", alpha: float = 0.05) -> Gate:
    check_options(flaky, alpha)
    here: dict[str, list[TrialResult]] = defaultdict(list)
    base: dict[str, list[TrialResult]] = defaultdict(list)
    for t in now:
        here[t.task].append(t)
    for t in baseline:
        base[t.task].append(t)
    result = Gate(alpha=alpha, flaky=flaky, gate_layer=gate_layer,
                  only_here=sorted(set(here) - set(base)), only_baseline=sorted(set(base) - set(here)))
    both = sorted(set(here) & set(base))
    result.changed = [task for task in both
                      if {t.content_hash for t in here[task]} != {t.content_hash for t in base[task]}]
    if result.changed and not allow_changed:
        raise InputError([f"--baseline: task {task} ran different content in the two jobs "
                          "(content hash differs); pass --allow-changed to compare anyway"
                          for task in result.changed])
    if gate_layer is not None:
        both = [task for task in both if (here[task][0].layer or base[task][0].layer) == gate_layer]
    verdicts = [_verdict(task, here[task][0].layer or base[task][0].layer or "-",
                         _counts(base[task]), _counts(here[task]), flaky) for task in both]
    _apply_tests(verdicts, alpha, flaky, result)
    result.verdicts = [v for v in verdicts if v.verdict != "same" and not (v.verdict == "flaky" and flaky == "ignore")]
    scope = f"tasks of the {gate_layer} layer" if gate_layer else "every task both jobs ran"
    result.rule = (f"{scope}; a task regresses when its pass rate dropped by more than chance "
                   f"explains (Fisher's exact test, one-sided; false discovery rate {alpha:g}, "
                   f"Benjamini-Hochberg over the {result.testable} task(s) that could regress: "
                   f"p <= {result.threshold:.3g}); with k=1 on a side, passed there and failed now; "
                   f"baseline-flaky tasks: {flaky}")
    return result


def _verdict(task: str, layer: str, before: tuple[int, int], after: tuple[int, int], flaky: str) -> TaskVerdict:
    (b, nb), (a, na) = before, after
    verdict = TaskVerdict(task, layer, before, after, "same")
    if nb == 0:  # nothing graded there: nothing to hold this job to
        return verdict
    if na == 0:
        if b == nb:
            verdict.verdict, verdict.gates = "ungraded", True
            verdict.note = "no attempt was graded now (all lost to errors); nothing shows it still passes"
        return verdict
    if min(nb, na) == 1:
        if 0 < b < nb:
            verdict.verdict, verdict.note = "flaky", ONE_ATTEMPT
        elif b == nb and a < na:
            verdict.verdict, verdict.gates, verdict.note = "regressed", True, ONE_ATTEMPT
        elif a == na and b < nb:
            verdict.verdict, verdict.note = "improved", ONE_ATTEMPT
        return verdict
    if 0 < b < nb:
        verdict.verdict = "flaky"
    return verdict


def _apply_tests(verdicts: list[TaskVerdict], alpha: float, flaky: str, result: Gate) -> None:
    """The exact tests, then Benjamini-Hochberg at alpha over the m tasks whose smallest
    possible p-value is at most alpha."""
    tested = [v for v in verdicts if min(v.before[1], v.after[1]) >= 2
              and not (v.verdict == "flaky" and flaky == "ignore")]
    for v in tested:
        (b, nb), (a, na) = v.before, v.after
        v.p_value = one_sided_p(a, na, b, nb) if a / na < b / nb else None
    could = [v for v in tested if smallest_p(v.after[0], v.after[1], v.before[0], v.before[1]) <= alpha]
    ordered = sorted(v.p_value for v in could if v.p_value is not None)
    m = result.testable = len(could)
    passing = [i for i, p in enumerate(ordered, 1) if p <= i * alpha / m]
    result.threshold = max(passing) * alpha / m if passing else alpha / max(m, 1)
    for v in tested:
        (b, nb), (a, na) = v.before, v.after
        if v.p_value is not None:
            regressed = v in could and v.p_value <= result.threshold
            if v.verdict == "flaky":
                v.gates = regressed and flaky == "gate"
                v.note = "regressed beyond chance" if regressed else "within chance"
            else:
                v.verdict, v.gates = ("regressed", True) if regressed else ("dropped", False)
        elif a / na > b / nb and v.verdict != "flaky" and one_sided_p(b, nb, a, na) <= alpha:
            v.verdict, v.p_value = "improved", one_sided_p(b, nb, a, na)


def attempts_to_tell(baseline: list[TrialResult], drop: float, alpha: float = 0.05,
                     power: float = 0.8, most: int = 20) -> tuple[int, list[str]]:
    """`-k auto`: the smallest k (at most `most`) with which a drop of `drop` in a task's
    pass rate from its baseline rate is detected with the given power at `alpha`, over
    every task the baseline graded and passed at least once; the tasks no k up to `most`
    can tell (too few baseline attempts) are named."""
    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for t in baseline:
        by_task[t.task].append(t)
    need, cannot = 1, []
    for task, trials in sorted(by_task.items()):
        b, nb = _counts(trials)
        if b == 0:
            continue
        k = next((k for k in range(1, most + 1) if _power(k, b, nb, drop, alpha) >= power), None)
        if k is None:
            cannot.append(f"{task} ({b}/{nb} in the baseline)")
        else:
            need = max(need, k)
    return need, cannot


def _power(k: int, b: int, nb: int, drop: float, alpha: float) -> float:
    """Chance that k attempts at the baseline rate minus `drop` gate under the rule above."""
    rate = max(0.0, b / nb - drop)
    chance = 0.0
    for a in range(k + 1):
        if min(k, nb) == 1:
            fires = b == nb and a < k
        else:
            fires = one_sided_p(a, k, b, nb) <= alpha
        if fires:
            chance += math.comb(k, a) * rate ** a * (1 - rate) ** (k - a)
    return chance
