"""A job's lifecycle events, for whoever watches it run (the live view, a pipeline's
progress lines, tests): one NamedTuple per kind (immutable and typed, at a tenth of a
frozen dataclass's cost at import), and `Observers`, where a watcher registers a handler
for the kinds it cares about. A job emits; it never knows who listens.

  Planned          the trials to run are known: `total` planned, `done` already complete
                   (a resumed job's)
  PhaseStarted     a trial entered a phase (build, launch, agent, verify, ...)
  AdmissionWaiting a task's trial waits for the host budget (`why`), or stopped waiting (None)
  TrialFinished    a trial's final result (after its retries), `done` of `total`

Handlers run on the job's threads (a trial's, or the scheduler's): they must be quick and
thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    from orchestrator.models.result import TrialResult


class Planned(NamedTuple):
    total: int
    done: int


class PhaseStarted(NamedTuple):
    trial_id: str
    label: str  # task#attempt
    phase: str


class AdmissionWaiting(NamedTuple):
    task: str
    why: str | None  # None: it no longer waits


class TrialFinished(NamedTuple):
    result: TrialResult
    done: int
    total: int


JobEvent = Planned | PhaseStarted | AdmissionWaiting | TrialFinished
E = TypeVar("E", Planned, PhaseStarted, AdmissionWaiting, TrialFinished)


class Observers:
    """Handlers by event type; `emit` calls each registered for the event's type, in order."""

    def __init__(self) -> None:
        self._handlers: dict[type[JobEvent], list[Callable[[Any], None]]] = {}

    def on(self, kind: type[E], handler: Callable[[E], None]) -> Observers:
        self._handlers.setdefault(kind, []).append(handler)
        return self

    def emit(self, event: JobEvent) -> None:
        for handler in self._handlers.get(type(event), ()):
            handler(event)
