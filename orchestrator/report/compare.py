"""Paired counterfactual comparison of two job results (SPEC-TASKS B.1): memory-on vs off.

Order-independent: the arm with more recall events is "on" (ties: the job's policy, then
the order given). Pairs are (task, attempt) of the same task content hash; every trial
that could not be paired is listed with the reason. A trial passes when its reward is >= 1.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass

from orchestrator.errors import InputError
from orchestrator.job import memory_shadow
from orchestrator.models import (
    VOID,
    ArmShadow,
    ClassDelta,
    CompareReport,
    JobResult,
    KStats,
    TrialSummary,
    pass_at_k,
    pass_hat_k,
    passes,
)
from orchestrator.report.render import md_cell

BOOTSTRAP_SAMPLES = 2000


@dataclass
class Pair:
    task: str
    attempt: int
    on: TrialSummary
    off: TrialSummary

    @property
    def on_pass(self) -> bool:
        return passes(self.on.reward)

    @property
    def off_pass(self) -> bool:
        return passes(self.off.reward)


def _choose_arms(a: JobResult, b: JobResult) -> tuple[JobResult, JobResult]:
    recalls = [sum(t.recall_events for t in job.trials) for job in (a, b)]
    if recalls[0] != recalls[1]:
        return (a, b) if recalls[0] > recalls[1] else (b, a)
    if a.policy != b.policy:
        return (a, b) if a.policy == "memory-on" else (b, a)
    return a, b


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar (binomial) p-value on discordant counts b and c."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def bootstrap_ci(diffs: list[int], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> list[float]:
    """95% percentile interval, in percentage points, of the mean paired difference."""
    if not diffs:
        return [0.0, 0.0]
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(samples))
    return [round(100 * means[int(0.025 * samples)], 2), round(100 * means[int(0.975 * samples) - 1], 2)]


def _per_task(trials: list[TrialSummary]) -> dict[str, list[bool]]:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for t in sorted(trials, key=lambda t: (t.task, t.attempt)):
        by_task[t.task].append(passes(t.reward))
    return by_task


def _k_stats(trials: list[TrialSummary]) -> KStats:
    by_task = _per_task(trials)
    n = len(by_task) or 1
    return KStats(pass_hat_k=round(pass_hat_k(by_task.values()), 4),
                  pass_at_k=round(pass_at_k(by_task.values()), 4),
                  mean_pass_at_1=round(sum(sum(v) / len(v) for v in by_task.values()) / n, 4),
                  flaky=sorted(t for t, v in by_task.items() if any(v) and not all(v)))


def compare(first: JobResult, second: JobResult) -> CompareReport:
    """Refuses (InputError, exit 2) two jobs that differ in neither policy nor condition:
    a paired difference between identical arms would only measure noise."""
    if first.policy == second.policy and first.condition_hash == second.condition_hash:
        same = "the same job twice" if first.job == second.job else "two jobs"
        raise InputError(f"compare: {same} ({first.job}, {second.job}) with the same policy "
                         f"{first.policy!r} and condition {first.condition!r}: nothing differs "
                         "between the arms, so there is nothing to compare")
    on, off = _choose_arms(first, second)
    matched, why_unpaired = _pairs(on, off)
    # A voided trial (answer leak) has no honest outcome: its pair leaves the statistics.
    pairs = [p for p in matched if p.on.failure_mode not in VOID and p.off.failure_mode not in VOID]
    voided = [f"{p.task}#{p.attempt}" for p in matched if p not in pairs]
    helpful = [p for p in pairs if p.on_pass and not p.off_pass]
    harmful = [p for p in pairs if not p.on_pass and p.off_pass and p.on.recall_events > 0]
    discordant_harm = [p for p in pairs if not p.on_pass and p.off_pass]
    n = len(pairs)
    on_rate = sum(p.on_pass for p in pairs) / n if n else 0.0
    off_rate = sum(p.off_pass for p in pairs) / n if n else 0.0
    classes: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        classes[p.on.scenario_class or "-"].append(p)
    differs = [what for what, a, b in (("policy", on.policy, off.policy),
                                       ("condition", on.condition_hash, off.condition_hash)) if a != b]
    shadows = {arm: memory_shadow(job.trials) for arm, job in (("on", on), ("off", off))}
    return CompareReport(
        on_job=on.job, off_job=off.job, arms_differ_in=differs, paired=n,
        unpaired=list(why_unpaired), unpaired_reasons=why_unpaired, void_pairs_excluded=voided,
        on_pass_rate=round(on_rate, 4), off_pass_rate=round(off_rate, 4),
        utility_delta_pp=round(100 * (on_rate - off_rate), 2),
        helpful=[f"{p.task}#{p.attempt}" for p in helpful],
        harmful=[f"{p.task}#{p.attempt}" for p in harmful],
        harmful_without_recall=[f"{p.task}#{p.attempt}" for p in discordant_harm if p not in harmful],
        avg_injected_chars=round(sum(p.on.injected_chars for p in pairs) / n, 1) if n else 0.0,
        p_value=round(mcnemar_exact(len(helpful), len(discordant_harm)), 6),
        ci95=bootstrap_ci([int(p.on_pass) - int(p.off_pass) for p in pairs]),
        per_class={cls: ClassDelta(
            n=len(ps), on=round(sum(p.on_pass for p in ps) / len(ps), 4),
            off=round(sum(p.off_pass for p in ps) / len(ps), 4),
            delta_pp=round(100 * (sum(p.on_pass for p in ps) - sum(p.off_pass for p in ps)) / len(ps), 2))
            for cls, ps in sorted(classes.items())},
        k={"on": _k_stats(on.trials), "off": _k_stats(off.trials)} if max(on.k, off.k) > 1 else None,
        memory_shadow={arm: ArmShadow.model_validate(sh, from_attributes=True) if sh else None
                       for arm, sh in shadows.items()} if any(shadows.values()) else None,
    )


def _pairs(on: JobResult, off: JobResult) -> tuple[list[Pair], dict[str, str]]:
    """Trials paired by (task, attempt) when both ran the same task content; the rest with
    the reason they could not be paired."""
    on_index = {(t.task, t.attempt): t for t in on.trials}
    off_index = {(t.task, t.attempt): t for t in off.trials}
    pairs, why = [], {}
    for key in sorted(set(on_index) | set(off_index)):
        a, b = on_index.get(key), off_index.get(key)
        label = f"{key[0]}#{key[1]}"
        if a is None or b is None:
            why[label] = f"ran only in {(on if a is not None else off).job}"
        elif a.content_hash and b.content_hash and a.content_hash != b.content_hash:
            why[label] = "the task's content differs between the two jobs"
        else:
            pairs.append(Pair(key[0], key[1], a, b))
    return pairs, why


def verdict(report: CompareReport) -> str:
    """The result in one plain sentence, statistics after."""
    chance = ("the difference is unlikely to be chance" if report.p_value < 0.05
              else "the difference could well be chance")
    return (f"Memory helped on {len(report.helpful)} of {report.paired} paired trials and hurt on "
            f"{report.harmed}; {chance} (p = {report.p_value:.3g}, delta {report.utility_delta_pp:+.1f} pp).")


def to_markdown(r: CompareReport) -> str:
    voids = r.void_pairs_excluded
    lines = [f"# memory-on vs memory-off: {r.on_job} vs {r.off_job}", "", verdict(r), "",
             f"The arms differ in: {', '.join(r.arms_differ_in or ['-'])}"
             + (f"; unpaired trials: {len(r.unpaired)}" if r.unpaired else ""),
             *[f"- not paired: {label}: {reason}" for label, reason in r.unpaired_reasons.items()],
             "",
             "## Utility", "",
             f"- paired trials: {r.paired}"
             + (f" ({len(voids)} void pair(s) left out: {md_cell(', '.join(voids))})" if voids else ""),
             f"- pass rate on {100 * r.on_pass_rate:.1f}%, off {100 * r.off_pass_rate:.1f}%",
             f"- utility delta: **{r.utility_delta_pp:+.1f} pp** "
             f"(95% bootstrap CI {r.ci95[0]:+.1f} .. {r.ci95[1]:+.1f})",
             f"- exact McNemar p = {r.p_value:.4g} (helpful {len(r.helpful)} vs harmful {r.harmed})",
             f"- average injected chars (on arm): {r.avg_injected_chars}", "",
             "## Helpful (on passed, off failed)", ""]
    lines += [f"- {md_cell(x)}" for x in r.helpful] or ["- none"]
    lines += ["", "## Harmful (on failed, off passed, recall fired)", ""]
    lines += [f"- {md_cell(x)}" for x in r.harmful] or ["- none"]
    lines += ["", "## Per class", "", "| class | n | on | off | delta pp |", "|---|---|---|---|---|"]
    lines += [f"| {md_cell(c)} | {v.n} | {v.on:.2f} | {v.off:.2f} | {v.delta_pp:+.1f} |" for c, v in r.per_class.items()]
    if r.memory_shadow:
        lines += ["", "## Memory shadow", "", "| metric | on | off |", "|---|---|---|"]
        arms = {arm: v.rows() if v else None for arm, v in r.memory_shadow.items()}
        for i, (metric, _) in enumerate(next(rows for rows in arms.values() if rows)):
            lines.append(f"| {metric} | " + " | ".join(
                rows[i][1] if rows else "-" for rows in (arms.get("on"), arms.get("off"))) + " |")
    if r.k:
        lines += ["", "## k attempts", "", "| arm | pass^k | pass@k | mean pass@1 | flaky |", "|---|---|---|---|---|"]
        for arm in ("on", "off"):
            s = r.k[arm]
            lines.append(f"| {arm} | {s.pass_hat_k:.2f} | {s.pass_at_k:.2f} | "
                         f"{s.mean_pass_at_1:.2f} | {md_cell(', '.join(s.flaky)) or '-'} |")
    return "\n".join(lines) + "\n"
