"""The job's result from its trials: counts, mean reward, pass@k and pass^k, the memory
shadow, one summary line per trial."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from orchestrator.job.options import JobOptions
from orchestrator.job.scheduler import Admission
from orchestrator.job.shadow import memory_shadow
from orchestrator.models import (
    ERRORED,
    VOID,
    JobResult,
    Manifest,
    TrialResult,
    TrialSummary,
    headline_of,
    pass_at_k,
    pass_hat_k,
    passes,
)


def summarize(options: JobOptions, manifest: Manifest, agent: str,
              results: Sequence[TrialResult | TrialSummary], images_built: int, started: float,
              admission: Admission | None = None) -> JobResult:
    """The job's result from its trials' results, or from their summaries (what a running
    job keeps of each finished trial: about a tenth of the memory)."""
    summaries = sorted((r if isinstance(r, TrialSummary) else trial_summary(r) for r in results),
                       key=lambda s: (s.task, s.attempt))
    counts = Counter(s.failure_mode.value for s in summaries)
    by_task: dict[str, list[float]] = {}
    for s in summaries:
        by_task.setdefault(s.task, []).append(s.headline)
    k = max((len(v) for v in by_task.values()), default=options.k or 1)
    passed = [[passes(v) for v in vs] for vs in by_task.values()]
    shadow = memory_shadow(summaries)
    return JobResult(
        job=options.job_name, condition=manifest.condition,
        condition_hash=manifest.condition_hash(), agent=agent, policy=options.policy, k=k,
        n_trials=len(summaries), counts=dict(counts),
        mean_reward=round(sum(s.headline for s in summaries) / len(summaries), 6) if summaries else 0.0,
        errored=[s.trial_id for s in summaries if s.failure_mode in ERRORED],
        void=[s.trial_id for s in summaries if s.failure_mode in VOID],
        pass_at_k=round(pass_at_k(passed), 6) if k > 1 and passed else None,
        pass_hat_k=round(pass_hat_k(passed), 6) if k > 1 and passed else None,
        images_built=images_built, started_at=started, finished_at=time.time(),
        peak_cpus=admission.peak_cpus if admission else None,
        peak_memory_mb=admission.peak_memory_mb if admission else None,
        retried=sum(1 for s in summaries if s.retries),
        trials=summaries, memory_shadow=shadow,
    )

def trial_summary(r: TrialResult) -> TrialSummary:
    memory = r.memory
    return TrialSummary(
        trial_id=r.trial_id, task=r.task, attempt=r.attempt, content_hash=r.content_hash,
        reward=headline_of(r.reward) if r.reward and r.failure_mode not in VOID else None,
        failure_mode=r.failure_mode, scenario_class=r.scenario_class, layer=r.layer,
        recall_events=memory.recall_events, injected_chars=memory.injected_chars,
        hits=memory.hits, suppressed=memory.suppressed,
        markers=memory.markers, marker_used=bool(memory.markers_used),
        shadow_events=memory.shadow_events, shadow_agree=memory.shadow_agree,
        audit_complete=memory.complete, retries=len(r.retries), node=r.node)
