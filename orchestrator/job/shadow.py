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

from orchestrator.models import MemoryShadow, TrialSummary

__all__ = ["MemoryShadow", "memory_shadow"]  # the model lives in models/ (JobResult's field)


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
