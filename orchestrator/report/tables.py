"""Aggregates of a job's trial results: per task, layer, class, failure mode, timings.
Pure functions over TrialResult lists, shared by the terminal, Markdown and HTML reports."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.models import TrialResult, pass_at_k, pass_hat_k, passes

PHASES = ("build", "start", "seed", "agent", "collect", "verify", "cleanup")


@dataclass
class Group:
    name: str
    n: int = 0
    passed: int = 0
    reward_sum: float = 0.0
    attempts: dict[str, list[bool]] = field(default_factory=dict)

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.n if self.n else 0.0

    @property
    def pass_at_k(self) -> float:
        return pass_at_k(self.attempts.values())

    @property
    def pass_hat_k(self) -> float:
        return pass_hat_k(self.attempts.values())


def _group_by(trials: list[TrialResult], key: Callable[[TrialResult], str | None]) -> list[Group]:
    groups: dict[str, Group] = {}
    for t in trials:
        name = key(t) or "-"
        g = groups.setdefault(name, Group(name))
        g.n += 1
        g.reward_sum += t.headline
        g.passed += passes(t.headline)
        g.attempts.setdefault(t.task, []).append(passes(t.headline))
    return [groups[k] for k in sorted(groups)]


@dataclass
class JobTables:
    by_task: list[Group]
    by_layer: list[Group]
    by_class: list[Group]
    failure_modes: dict[str, int]
    phase_means: dict[str, float]
    tokens: int
    cost: float
    k: int
    regression_behaviours: list[tuple[str, str, str]]  # (task, verdict, failure mode)
    tokens_estimated: int = 0  # of `tokens`: calls whose upstream sent no usage (~4 bytes a token)
    cost_unknown_trials: int = 0  # trials with a call whose dollars are unknown (no usage or no price)

    @property
    def tokens_text(self) -> str:
        """The job's tokens as a person should read them: counted, and what is estimated."""
        if not self.tokens_estimated:
            return f"tokens {self.tokens}"
        return f"tokens {self.tokens} ({self.tokens_estimated} estimated: the upstream counted no usage for some calls)"

    @property
    def cost_text(self) -> str:
        """The job's cost, or that it is unknown (never $0 for calls nobody priced or counted)."""
        if not self.cost_unknown_trials:
            return f"cost ${self.cost:.4f}"
        return (f"cost unknown ({self.cost_unknown_trials} trials had calls with no usage or no price; "
                f"the rest cost ${self.cost:.4f})")


def tables(trials: list[TrialResult]) -> JobTables:
    phases: defaultdict[str, float] = defaultdict(float)
    for t in trials:
        for phase in PHASES:
            phases[phase] += getattr(t.timings, phase)
    n = len(trials) or 1
    per_task = Counter(t.task for t in trials)
    regression = []
    for t in sorted(trials, key=lambda t: (t.task, t.attempt)):
        if t.layer == "regression":
            verdict = "kept" if t.headline >= 1.0 else ("error" if t.reward is None else "broken")
            regression.append((f"{t.task}#{t.attempt}", verdict, t.failure_mode.value))
    return JobTables(
        by_task=_group_by(trials, lambda t: t.task),
        by_layer=_group_by(trials, lambda t: t.layer),
        by_class=_group_by(trials, lambda t: t.scenario_class),
        failure_modes=dict(sorted(Counter(t.failure_mode.value for t in trials).items())),
        phase_means={p: round(phases[p] / n, 3) for p in PHASES},
        tokens=sum(t.tokens for t in trials), cost=round(sum(t.cost for t in trials), 6),
        k=max(per_task.values(), default=1),
        regression_behaviours=regression,
        tokens_estimated=sum(t.model.estimated_prompt_tokens + t.model.estimated_completion_tokens
                             for t in trials if t.model is not None),
        cost_unknown_trials=sum(not t.cost_known for t in trials),
    )
