"""How long a task's trials take, so a job can start the longest first.

A job of many trials on a few slots finishes sooner when the long trials start first (the
longest-processing-time rule): started last, one long trial keeps the job running alone
after everything else is done. Where durations come from, best first:

- the baseline job (`orchestra run --baseline JOB_DIR`): its trials' wall times;
- what orchestra recorded on this host: after every job, each task's median trial time
  per agent goes to `$ORCHESTRA_CACHE/durations.json` (or `$ORCHESTRA_DURATIONS`; set to
  the empty string: nothing read or written), keyed by the task's content hash (a changed
  task is a new task), the newest MAX_PER_AGENT kept, so the second night's job is
  already in order.

Tasks with no known duration start first, in their given order: what is unknown may be
the longest. The rest follow, longest first.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from orchestrator.log import get_logger
from orchestrator.models import FailureMode, TrialResult
from orchestrator.paths import cache_root
from orchestrator.util import write_json_atomic

log = get_logger()
NOT_A_DURATION = {FailureMode.CANCELLED, FailureMode.INFEASIBLE, FailureMode.BUILD_ERROR}
T = TypeVar("T")


MAX_PER_AGENT = 50_000


def _cache_file() -> Path | None:
    where = os.environ.get("ORCHESTRA_DURATIONS")
    if where is None:
        return cache_root() / "durations.json"
    return Path(where) if where else None


def seconds_of(trial: TrialResult) -> float | None:
    """A trial's wall seconds, when it really ran (None for cancelled, infeasible, unbuilt)."""
    if trial.failure_mode in NOT_A_DURATION or not (trial.started_at and trial.finished_at):
        return None
    return trial.finished_at - trial.started_at


def medians(seen: dict[str, list[float]]) -> dict[str, float]:
    return {key: round(statistics.median(values), 3) for key, values in seen.items() if values}


def measured(trials: Iterable[TrialResult], agent: str | None = None) -> dict[str, float]:
    """Median wall seconds per task content hash over trials that really ran."""
    seen: dict[str, list[float]] = {}
    for t in trials:
        if (seconds := seconds_of(t)) is not None and (agent is None or t.agent == agent):
            seen.setdefault(t.content_hash, []).append(seconds)
    return medians(seen)


def recorded(agent: str) -> dict[str, float]:
    """What this host recorded for `agent` (empty when nothing readable is there)."""
    if (where := _cache_file()) is None:
        return {}
    try:
        data = json.loads(where.read_text())
        return {k: float(v) for k, v in (data.get(agent) or {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def record(agent: str, found: dict[str, float]) -> None:
    """Remember this job's medians (`medians` of its trials) for the next one (best effort:
    a job never fails here)."""
    if not found or (where := _cache_file()) is None:
        return
    try:
        try:
            data = json.loads(where.read_text())
            mine = {k: float(v) for k, v in data[agent].items()} if agent in data else {}
        except (OSError, ValueError, AttributeError, TypeError):
            data, mine = {}, {}
        for key, seconds in found.items():  # newest last: the oldest go first past the cap
            mine.pop(key, None)
            mine[key] = seconds
        data[agent] = dict(list(mine.items())[-MAX_PER_AGENT:])
        write_json_atomic(where, data)
    except OSError as exc:
        log.warning("durations.not_recorded", error=str(exc))


def longest_first(items: list[T], key_of: Callable[[T], str], known: dict[str, float]) -> list[T]:
    """Unknown durations first (given order), then the known, longest first (stable)."""
    unknown = [i for i in items if key_of(i) not in known]
    rest = sorted((i for i in items if key_of(i) in known), key=lambda i: -known[key_of(i)])
    return unknown + rest
