"""The memory shadow (SPEC-TASKS B.1's Reasonix row): what memory did in a job, from the
audit of every trial.

- recall events, hits, injected chars and suppressed facts, summed;
- the point-of-use marker rate x/N: trials whose marker reached a tool argument or the
  answer after a recall (x), over trials of tasks that declare markers (N);
- the top-1 agreement rate: on recalls that carry the V2 shadow retriever's top-1 beside
  the primary's (the reference agent and `recall` record both), how often the two agree,
  counted where at least one of them found something.
"""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator.models.result import TrialSummary


class MemoryShadow(BaseModel):
    trials: int = 0
    recall_events: int = 0
    hits: int = 0
    injected_chars: int = 0
    suppressed: int = 0
    marker_trials: int = 0  # x: a marker used at point of use after a recall
    marker_eligible: int = 0  # N: trials whose task declares markers
    shadow_events: int = 0
    shadow_agree: int = 0

    @property
    def marker_rate(self) -> str:
        return f"{self.marker_trials}/{self.marker_eligible}"

    @property
    def agreement(self) -> float | None:
        return round(self.shadow_agree / self.shadow_events, 4) if self.shadow_events else None

    def rows(self) -> list[list[str]]:
        """(metric, value) rows for every report format."""
        agreement = ("-" if self.agreement is None else
                     f"{100 * self.agreement:.0f}% ({self.shadow_agree}/{self.shadow_events})")
        return [["recall events", str(self.recall_events)], ["hits", str(self.hits)],
                ["injected chars", str(self.injected_chars)], ["suppressed", str(self.suppressed)],
                ["point-of-use markers (x/N)", self.marker_rate],
                ["top-1 agreement, primary vs V2 shadow", agreement]]

    def line(self) -> str:
        return "memory shadow: " + ", ".join(f"{name} {value}" for name, value in self.rows())


def memory_shadow(trials: list[TrialSummary]) -> MemoryShadow | None:
    """None when no trial recalled anything and no task declares markers."""
    shadow = MemoryShadow(
        trials=len(trials),
        recall_events=sum(t.recall_events for t in trials), hits=sum(t.hits for t in trials),
        injected_chars=sum(t.injected_chars for t in trials),
        suppressed=sum(t.suppressed for t in trials),
        marker_trials=sum(1 for t in trials if t.markers and t.marker_used),
        marker_eligible=sum(1 for t in trials if t.markers),
        shadow_events=sum(t.shadow_events for t in trials),
        shadow_agree=sum(t.shadow_agree for t in trials))
    return shadow if shadow.recall_events or shadow.marker_eligible else None
