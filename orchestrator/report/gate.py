"""The regression gate for release pipelines: this job against a baseline job.

Which tasks are compared: every task both jobs ran (the default; Harbor datasets carry no
layers), or only those of one `[metadata] evaluation_layer` (`gate_layer`). A task is
matched by its name and, when its name is on one side only, by its content hash: a task's
name comes from its dataset folder, so the same dataset checked out under another name (or
a task renamed in task.toml) is still the same task, and is compared as such. Each verdict
says how its task was matched (`name`, `content hash`, or `name only` for a task whose
content changed, compared only with allow_changed: else the comparison would mix versions
and is refused). A gate that matched nothing, or whose baseline graded none of what it
matched, would pass without comparing anything: it is refused (InputError, exit 2), both
jobs named.

Per task, each side is counted as passes out of graded attempts. An attempt passes when it
ended with failure mode `none` and a headline reward >= 1; a voided attempt (answer leak),
a timeout, an OOM and a verifier error count as failed; attempts the machinery lost
(models/failures.py NOT_GRADED: infra, launch, build, endpoint errors, cancelled,
infeasible) are not graded and are
left out of the counts (a task the baseline passed with no graded attempt now gates:
nothing shows the contract still holds).

The rule, honest about chance, one rule for any k on either side:
- Fisher's exact test, one-sided (the pass rate now is lower than there), per task,
  whenever both sides have graded attempts, and Benjamini-Hochberg over the tasks that
  could regress at all: a task whose counts could never reach p <= alpha (5/5 -> 5/5,
  4/5 -> 4/5, 1/1 -> 19/20) cannot be a false alarm and is not counted (Gilbert 2005, "A
  modified false discovery rate multiple-comparisons procedure for discrete data", after
  Tarone 1990). So the expected share of false alarms among the regressions named stays
  at alpha, one broken task among a hundred that pass is tested at alpha itself, and
  thirty broken at once are all named (a family-wise correction would name none of them
  at k = 5, where the smallest p is 1/252). Mixed k is the same test: 1/1 -> 19/20 is a
  drop within chance (p = 0.95), 1/1 -> 0/20 a regression (p = 1/21).
- only where both sides ran once (1 attempt against 1) no test can ever tell (the smallest
  p is 1/2), so the plain rule applies (passed there, failed now) and the verdict says
  one attempt cannot tell a regression from chance.
- a task flaky in the baseline itself (some passes, some fails) is reported as flaky and
  gates only with flaky="gate"; flaky="ignore" leaves it out (named in `ignored`).
Improvements are the same test the other way round; they never gate. Every compared task
is in the verdicts, the unchanged ones too (`same`), so a pipeline sees what was compared.

The exact test is ten lines of integer arithmetic (math.comb): scipy would add ~100 MB of
install to compute one hypergeometric tail.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal, NamedTuple, get_args

from pydantic import BaseModel, Field, computed_field

from orchestrator.errors import InputError
from orchestrator.models import NOT_GRADED, FailureMode, TrialResult
from orchestrator.util import JsonObject

FLAKY_POLICIES = ("gate", "report", "ignore")
ONE_ATTEMPT = "one attempt each side: one attempt cannot tell a regression from chance"
MatchedBy = Literal["name", "content hash", "name only"]
Verdict = Literal["regressed", "improved", "flaky", "dropped", "same", "ungraded", "unjudged"]
Test = Literal["exact", "one attempt", "none"]


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


def _smallest_p(passes_now: int, n_now: int, passes_before: int, n_before: int) -> float:
    """The smallest p-value these margins could give (all the passes on the baseline side)."""
    total = passes_now + passes_before
    lowest = max(0, total - n_before)
    return one_sided_p(lowest, n_now, total - lowest, n_before)


class Counts(BaseModel):
    passed: int
    graded: int

    def __str__(self) -> str:
        return f"{self.passed}/{self.graded}"


class TaskVerdict(BaseModel):
    """One compared task: its counts on both sides, how it was matched, what was found."""

    task: str                # its name in this job
    baseline_task: str       # its name in the baseline (another when matched by content hash)
    matched_by: MatchedBy
    layer: str               # "-": none
    baseline: Counts
    now: Counts
    verdict: Verdict
    test: Test = "none"      # which rule judged it: the exact test, the one-attempt rule, none
    gates: bool = False
    p_value: float | None = None
    note: str = ""

    def line(self) -> str:
        parts = [f"{self.task}  {self.baseline} -> {self.now}"]
        if self.p_value is not None:
            parts.append(f"p={self.p_value:.3g}")
        if self.note:
            parts.append(f"({self.note})")
        if self.matched_by == "content hash":
            parts.append(f"[matched by content hash to the baseline's {self.baseline_task}]")
        elif self.matched_by == "name only":
            parts.append("[matched by name; its content changed]")
        return "  ".join(parts)


class Gate(BaseModel):
    """The gate's verdict: the rule, every compared task's verdict, what was not compared."""

    job: str = ""
    baseline_job: str = ""
    rule: str = ""
    alpha: float = 0.05
    flaky: str = "report"
    gate_layer: str | None = None
    threshold: float | None = None  # the per-task p-value at or below which a task regressed
    testable: int = Field(default=0, serialization_alias="testable_tasks")  # m: tasks that could regress
    verdicts: list[TaskVerdict] = Field(default_factory=list, serialization_alias="tasks")
    only_here: list[str] = Field(default_factory=list)
    only_baseline: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)
    ignored: list[str] = Field(default_factory=list)  # baseline-flaky tasks left out (--flaky ignore)

    def of(self, verdict: str) -> list[TaskVerdict]:
        return [v for v in self.verdicts if v.verdict == verdict]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def failed(self) -> bool:
        """Whether --fail-on-regression exits 1."""
        return any(v.gates for v in self.verdicts)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def compared(self) -> int:
        return len(self.verdicts)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def matched(self) -> dict[str, int]:  # how the compared tasks were matched -> how many
        found = {by: sum(v.matched_by == by for v in self.verdicts) for by in get_args(MatchedBy)}
        return {by: n for by, n in found.items() if n}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def regressions(self) -> dict[str, list[str]]:  # layer -> tasks that gate
        return _by_layer(v for v in self.verdicts if v.gates)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def improvements(self) -> dict[str, list[str]]:  # layer -> tasks that improved
        return _by_layer(self.of("improved"))

    def as_dict(self) -> JsonObject:
        """regressions.json and `report --json`'s gate."""
        return self.model_dump(mode="json", by_alias=True)

    def lines(self) -> list[str]:
        """What the gate found, one line each, for the terminal and the CI log."""
        counts = {verdict: len(self.of(verdict)) for verdict in get_args(Verdict)}
        how = ", ".join(f"{n} by {by}" for by, n in self.matched.items())
        out = [f"gate: {self.rule}",
               f"compared {self.compared} task(s) of {self.job} with the baseline {self.baseline_job} "
               f"(matched {how}): " + ", ".join(f"{n} {'unchanged' if verdict == 'same' else verdict}"
                                                for verdict, n in counts.items() if n)]
        labels = (("regressed", "regressed"), ("ungraded", "not graded now"),
                  ("flaky", "flaky in the baseline"), ("dropped", "dropped within chance"),
                  ("improved", "improved"), ("unjudged", "not graded in the baseline"))
        for verdict, label in labels:
            for v in self.of(verdict):
                tag = "" if verdict != "flaky" else (" [gates]" if v.gates else " [not gated]")
                out.append(f"{label} ({_layer_name(v.layer)}): {v.line()}{tag}")
        for v in self.of("same"):
            if v.matched_by != "name":  # how it was matched is worth a line of its own
                out.append(f"unchanged ({_layer_name(v.layer)}): {v.line()}")
        if same := [v.task for v in self.of("same") if v.matched_by == "name"]:
            out.append(f"unchanged: {_names(same)}")
        if self.ignored:
            out.append(f"flaky in the baseline, left out (--flaky ignore): {_names(self.ignored)}")
        if self.only_baseline:
            out.append(f"not run here (in the baseline only): {_names(self.only_baseline)}")
        if self.only_here:
            out.append(f"not in the baseline (not compared): {_names(self.only_here)}")
        return out


def _by_layer(verdicts: Iterable[TaskVerdict]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for v in verdicts:
        found.setdefault(v.layer, []).append(v.task)
    return found


def _names(names: list[str], most: int = 20) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _layer_name(layer: str) -> str:
    return "no layer" if layer == "-" else f"{layer} layer"


def counts_of(trials: list[TrialResult]) -> Counts:
    """Passes out of graded attempts (NOT_GRADED modes are left out)."""
    graded = [t for t in trials if t.failure_mode not in NOT_GRADED]
    return Counts(passed=sum(passed(t) for t in graded), graded=len(graded))


def check_options(flaky: str, alpha: float) -> None:
    problems = []
    if flaky not in FLAKY_POLICIES:
        problems.append(f"--flaky: {flaky!r} is not one of {', '.join(FLAKY_POLICIES)}")
    if not 0 < alpha < 1:
        problems.append(f"--alpha: {alpha:g} is not between 0 and 1")
    if problems:
        raise InputError(problems)


class TaskKey(NamedTuple):
    """What matching needs of a task on one side: its content hashes and its layer."""

    hashes: frozenset[str]
    layer: str | None


class Match(NamedTuple):
    task: str           # the name in this job
    baseline_task: str  # the name in the baseline
    matched_by: MatchedBy


def _keys_of(trials: Iterable[TrialResult]) -> dict[str, TaskKey]:
    hashes: dict[str, set[str]] = defaultdict(set)
    layers: dict[str, str | None] = {}
    for t in trials:
        hashes[t.task].add(t.content_hash)
        layers[t.task] = layers.get(t.task) or t.layer
    return {task: TaskKey(frozenset(h), layers[task]) for task, h in hashes.items()}


def _match_tasks(here: dict[str, TaskKey], base: dict[str, TaskKey], names: tuple[str, str],
                allow_changed: bool = False, gate_layer: str | None = None
                ) -> tuple[list[Match], list[str], list[str], list[str]]:
    """This job's tasks matched to the baseline's: by name, then (the names left on each
    side) by content hash, when exactly one task on each side has it. Returns the matches,
    the tasks here only, the baseline's only, and those matched by name whose content
    changed. Refuses (InputError) changed content without allow_changed, and a gate with
    nothing to compare (no match, or none of gate_layer)."""
    matches = [Match(task, task, "name" if here[task].hashes == base[task].hashes else "name only")
               for task in sorted(set(here) & set(base))]
    changed = [m.task for m in matches if m.matched_by == "name only"]
    left_here = {_hashes_one(here[t]): t for t in here if t not in base and len(here[t].hashes) == 1}
    left_base = {_hashes_one(base[t]): t for t in base if t not in here and len(base[t].hashes) == 1}
    twice_here = _hashes_twice(here, set(here) - set(base))
    twice_base = _hashes_twice(base, set(base) - set(here))
    for content in sorted(set(left_here) & set(left_base) - twice_here - twice_base):
        matches.append(Match(left_here[content], left_base[content], "content hash"))
    matches.sort()
    job, baseline_job = names
    if changed and not allow_changed:
        raise InputError([f"--baseline: task {task} ran different content in {job} and the baseline "
                          f"{baseline_job} (content hash differs); pass --allow-changed to compare anyway"
                          for task in changed])
    if not matches:
        raise InputError(f"--baseline: nothing to compare: {job} ({len(here)} task(s): "
                         f"{_names(sorted(here), 5)}) and the baseline {baseline_job} ({len(base)} "
                         f"task(s): {_names(sorted(base), 5)}) share no task, by name or by content "
                         "hash; the gate would pass without comparing anything. Gate against a "
                         "run of the same dataset.")
    matched_here = {m.task for m in matches}
    matched_base = {m.baseline_task for m in matches}
    only_here = sorted(t for t in here if t not in matched_here)
    only_base = sorted(t for t in base if t not in matched_base)
    if gate_layer is not None:
        in_layer = [m for m in matches if (here[m.task].layer or base[m.baseline_task].layer) == gate_layer]
        if not in_layer:
            raise InputError(f"--gate-layer: nothing to compare: none of the {len(matches)} task(s) "
                             f"{job} and the baseline {baseline_job} share has [metadata] "
                             f"evaluation_layer = {gate_layer!r}; the gate would pass without "
                             "comparing anything (leave out --gate-layer to compare every task)")
        matches = in_layer
    return matches, only_here, only_base, changed


def _hashes_one(key: TaskKey) -> str:
    return next(iter(key.hashes))


def _hashes_twice(side: dict[str, TaskKey], names: set[str]) -> set[str]:
    """Content hashes two unmatched tasks of one side share: which is which cannot be told."""
    seen: dict[str, int] = defaultdict(int)
    for name in names:
        for content in side[name].hashes:
            seen[content] += 1
    return {content for content, n in seen.items() if n > 1}


def check_comparable(here: dict[str, TaskKey], baseline: list[TrialResult], names: tuple[str, str],
                     allow_changed: bool = False, gate_layer: str | None = None) -> None:
    """Before a run: refuse (InputError) what the gate after it would refuse for want of
    anything to compare (`here`: the tasks about to run), so no job runs for nothing."""
    matches, *_ = _match_tasks(here, _keys_of(baseline), names, allow_changed, gate_layer)
    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for t in baseline:
        by_task[t.task].append(t)
    if all(counts_of(by_task[m.baseline_task]).graded == 0 for m in matches):
        raise _nothing_graded(names, len(matches))


def _nothing_graded(names: tuple[str, str], shared: int) -> InputError:
    return InputError(f"--baseline: nothing to compare: the baseline {names[1]} graded none of the "
                      f"{shared} task(s) it shares with {names[0]} (every attempt lost to errors), so "
                      "there is nothing to hold this job to; the gate would pass without comparing "
                      "anything. Gate against a baseline that ran.")


def _job_name(trials: list[TrialResult], fallback: str) -> str:
    return f"job {trials[0].job}" if trials else fallback


def gate(now: list[TrialResult], baseline: list[TrialResult], allow_changed: bool = False,
         gate_layer: str | None = None, flaky: str = "report", alpha: float = 0.05,
         names: tuple[str, str] | None = None) -> Gate:
    """The verdict on `now` against `baseline`. `names`: how to call the two jobs in the
    output (default: their job names)."""
    check_options(flaky, alpha)
    names = names or (_job_name(now, "this job (no trials)"), _job_name(baseline, "job (no trials)"))
    here: dict[str, list[TrialResult]] = defaultdict(list)
    base: dict[str, list[TrialResult]] = defaultdict(list)
    for t in now:
        here[t.task].append(t)
    for t in baseline:
        base[t.task].append(t)
    matches, only_here, only_baseline, changed = _match_tasks(
        _keys_of(now), _keys_of(baseline), names, allow_changed, gate_layer)
    result = Gate(job=names[0], baseline_job=names[1], alpha=alpha, flaky=flaky, gate_layer=gate_layer,
                  only_here=only_here, only_baseline=only_baseline, changed=changed)
    verdicts = [_verdict(m, here[m.task][0].layer or base[m.baseline_task][0].layer or "-",
                         counts_of(base[m.baseline_task]), counts_of(here[m.task])) for m in matches]
    if all(v.verdict == "unjudged" for v in verdicts):
        raise _nothing_graded(names, len(verdicts))
    result.ignored = [v.task for v in verdicts if v.verdict == "flaky" and flaky == "ignore"]
    verdicts = [v for v in verdicts if v.task not in result.ignored]
    _apply_tests(verdicts, alpha, flaky, result)
    result.verdicts = verdicts
    scope = f"tasks of the {gate_layer} layer" if gate_layer else "every task both jobs ran"
    result.rule = (f"{scope} (matched by name, else by content hash); a task regresses when its pass "
                   "rate dropped by more than chance explains (Fisher's exact test, one-sided, for "
                   f"any k on either side; false discovery rate {alpha:g}, Benjamini-Hochberg over "
                   f"the {result.testable} task(s) that could regress: p <= {result.threshold:.3g}); "
                   "only where both sides ran once, passed there and failed now (one attempt cannot "
                   f"tell a regression from chance); baseline-flaky tasks: {flaky}")
    return result


def _verdict(match: Match, layer: str, before: Counts, after: Counts) -> TaskVerdict:
    (b, nb), (a, na) = (before.passed, before.graded), (after.passed, after.graded)
    verdict = TaskVerdict(task=match.task, baseline_task=match.baseline_task, matched_by=match.matched_by,
                          layer=layer, baseline=before, now=after, verdict="same")
    if nb == 0:  # nothing graded there: nothing to hold this job to
        verdict.verdict, verdict.note = "unjudged", "no attempt was graded in the baseline"
        return verdict
    if na == 0:
        verdict.verdict = "ungraded"
        verdict.gates = b == nb
        verdict.note = ("no attempt was graded now (all lost to errors); nothing shows it still passes"
                        if verdict.gates else "no attempt was graded now (all lost to errors)")
        return verdict
    if nb == 1 and na == 1:
        verdict.test = "one attempt"
        if b == 1 and a == 0:
            verdict.verdict, verdict.gates, verdict.note = "regressed", True, ONE_ATTEMPT
        elif b == 0 and a == 1:
            verdict.verdict, verdict.note = "improved", ONE_ATTEMPT
        return verdict
    verdict.test = "exact"
    if 0 < b < nb:
        verdict.verdict = "flaky"
    return verdict


def _apply_tests(verdicts: list[TaskVerdict], alpha: float, flaky: str, result: Gate) -> None:
    """The exact tests, then Benjamini-Hochberg at alpha over the m tasks whose smallest
    possible p-value is at most alpha."""
    tested = [v for v in verdicts if v.test == "exact"]
    for v in tested:
        (b, nb), (a, na) = (v.baseline.passed, v.baseline.graded), (v.now.passed, v.now.graded)
        v.p_value = one_sided_p(a, na, b, nb) if a / na < b / nb else None
    could = [v for v in tested if _smallest_p(v.now.passed, v.now.graded, v.baseline.passed,
                                             v.baseline.graded) <= alpha]
    ordered = sorted(v.p_value for v in could if v.p_value is not None)
    m = result.testable = len(could)
    passing = [i for i, p in enumerate(ordered, 1) if p <= i * alpha / m]
    result.threshold = max(passing) * alpha / m if passing else alpha / max(m, 1)
    for v in tested:
        (b, nb), (a, na) = (v.baseline.passed, v.baseline.graded), (v.now.passed, v.now.graded)
        if v.p_value is not None:
            regressed = v in could and v.p_value <= result.threshold
            if v.verdict == "flaky":
                v.gates = regressed and flaky == "gate"
                v.note = "regressed beyond chance" if regressed else "within chance"
            else:
                v.verdict, v.gates = ("regressed", True) if regressed else ("dropped", False)
        elif a / na > b / nb and v.verdict != "flaky" and one_sided_p(b, nb, a, na) <= alpha:
            v.verdict, v.p_value = "improved", one_sided_p(b, nb, a, na)
