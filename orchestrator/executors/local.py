"""The local executor: a trial runs in the calling (scheduler) thread, on this host."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.executors.spec import Item, TrialSpec
from orchestrator.models import TrialResult
from orchestrator.trial import TrialContext, run_trial


class LocalExecutor:
    name = "local"

    def capacity(self) -> tuple[float, int] | None:
        return None

    def runner(self, ctx: TrialContext, spec: TrialSpec) -> Callable[[Item], TrialResult]:
        return lambda item: run_trial(ctx, item.task, item.attempt, item.retries)

    def reap(self, label: str) -> None:
        return None  # the job's own reaper covers this host

    def close(self) -> None:
        return None
