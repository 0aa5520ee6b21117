"""Executors: where a job's trials run. The job's scheduler hands an executor one trial spec
(task, attempt, earlier tries) at a time and receives its result; the executor never sees
the job's bookkeeping, and the job never sees how a trial reached its node.

- `local`: in a thread of this process, against this host's runtime.
- `ray`: as a Ray task on some node of a cluster, against that node's runtime; the trial
  folder comes back to the driver, which alone writes the job directory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.executors.spec import Item, TrialSpec
    from orchestrator.models import TrialResult
    from orchestrator.trial import TrialContext

__all__ = ["Executor", "Item", "TrialSpec", "open_executor"]
__getattr__, __dir__ = public_face(__name__, {
    "Item": "spec",
    "TrialSpec": "spec",
})


class Executor(Protocol):
    name: str

    def capacity(self) -> tuple[float, int] | None:
        """(CPUs, memory MB) trials may use at once, or None: the local engine's."""
        ...

    def runner(self, ctx: TrialContext, spec: TrialSpec) -> Callable[[Item], TrialResult]:
        """How one scheduler item becomes a TrialResult. `spec` is every job option a trial
        depends on: a remote node makes its context from it (TrialSpec.context), as `ctx`
        was made here."""
        ...

    def reap(self, label: str) -> None:
        """Remove what trials of `label` left on wherever they ran (after a cancel)."""
        ...

    def close(self) -> None: ...


def open_executor(kind: str, ray_address: str | None = None) -> Executor:
    if kind == "ray":
        from orchestrator.executors.ray import RayExecutor

        return RayExecutor(ray_address)
    from orchestrator.executors.local import LocalExecutor

    return LocalExecutor()
