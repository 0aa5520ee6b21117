"""Whether the engine answers, and how long it was gone: a job rides out an engine that
restarts or answers errors for a while instead of spending its trials' retries inside the
outage.

- Before a trial attempt starts, the scheduler asks `wait()`: while the engine does not
  answer, the attempt waits (polling, a message once per outage), bounded by `max_wait`
  (`--engine-wait`); past it the job stops as infrastructure, results kept, to resume.
- A trial that ended in an infrastructure error is asked about with `blamed()`: when the
  engine was down during it (found now, or an outage recorded in its span), its retry
  is free (the outage's, not the trial's) and waits for the engine like a new attempt.
- Every outage seen is recorded (start, end); the job's result says how long the engine
  was gone in all.

One probe at a time: threads that ask together share its answer (at most one ping per
`interval`), so a pool of waiting trials costs the engine one request a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from orchestrator.errors import InfraError
from orchestrator.log import get_logger

log = get_logger()


class EngineGone(InfraError):
    """The engine did not answer within the job's bound: the job stops, results kept."""


class EngineWatch:
    def __init__(self, probe: Callable[[], str | None], max_wait: float, cancel: threading.Event,
                 interval: float = 1.0):
        """`probe()`: None when the engine answers, else why not (never raises)."""
        self.probe, self.max_wait, self.cancel, self.interval = probe, max_wait, cancel, interval
        self.outages: list[tuple[float, float]] = []  # (gone at, back at), wall clock
        self._down_since: float | None = None
        self._checked_at = 0.0
        self._why: str | None = None
        self._lock = threading.Lock()

    def answers(self, fresh: bool = False) -> bool:
        """Ask the engine (or, unless `fresh`, share an answer at most `interval` old); an
        outage opens on the first no and closes on the first yes after it."""
        with self._lock:
            now = time.time()
            if not fresh and self._checked_at and now - self._checked_at < self.interval:
                return self._why is None
            self._why, self._checked_at = self.probe(), time.time()
            if self._why is not None and self._down_since is None:
                self._down_since = now
                log.warning("engine.gone", why=self._why, max_wait=self.max_wait,
                            message=f"the engine does not answer ({self._why}); trials wait for "
                                    f"it, up to {self.max_wait:g} s (--engine-wait)")
            elif self._why is None and self._down_since is not None:
                self.outages.append((self._down_since, now))
                log.warning("engine.back", seconds=round(now - self._down_since, 1),
                            message=f"the engine answers again after {now - self._down_since:.1f} s; "
                                    "trials go on")
                self._down_since = None
            return self._why is None

    def wait(self) -> bool:
        """Block until the engine answers: True, or False when the job was cancelled.
        Raises EngineGone once it has not answered for `max_wait` seconds."""
        while not self.answers():
            with self._lock:
                gone_for = time.time() - (self._down_since or time.time())
            if gone_for > self.max_wait:
                raise EngineGone(
                    f"the engine has not answered for {gone_for:.0f} s ({self._why}); the job "
                    "stopped. Results already written are intact: once the engine is back, "
                    "`orchestra run --resume JOB_DIR --retry-errors` runs the rest.")
            if self.cancel.wait(self.interval):
                return False
        return not self.cancel.is_set()

    def blamed(self, started: float, ended: float) -> bool:
        """Whether the engine was gone at some time in [started, ended], or is now."""
        if not self.answers(fresh=True):  # a cached yes may predate the failure
            return True
        with self._lock:
            return any(gone <= ended and back >= started for gone, back in self.outages)

    @property
    def down_seconds(self) -> float:
        with self._lock:
            open_now = time.time() - self._down_since if self._down_since is not None else 0.0
            return round(sum(back - gone for gone, back in self.outages) + open_now, 1)
