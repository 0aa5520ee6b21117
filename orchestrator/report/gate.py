"""The regression gate for pre-release pipelines: this job against a baseline job.

A task *passes* in a job when every one of its trials there passed (reward >= 1, no error,
not void). A regression is a task that passed in the baseline and does not now; an
improvement the reverse. Both jobs must have run the same content for a task (its content
hash), else the comparison would mix versions: refused unless allow_changed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from orchestrator.errors import InputError
from orchestrator.models.result import FailureMode, TrialResult


@dataclass
class Gate:
    regressions: dict[str, list[str]] = field(default_factory=dict)  # layer -> tasks
    improvements: dict[str, list[str]] = field(default_factory=dict)
    only_here: list[str] = field(default_factory=list)
    only_baseline: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    @property
    def regression_layer_failed(self) -> bool:
        return bool(self.regressions.get("regression"))

    def as_dict(self) -> dict:
        return {"regressions": self.regressions, "improvements": self.improvements,
                "only_here": self.only_here, "only_baseline": self.only_baseline,
                "changed": self.changed}


def _passed(trials: list[TrialResult]) -> bool:
    return all(t.failure_mode == FailureMode.NONE and t.headline >= 1.0 for t in trials)


def gate(now: list[TrialResult], baseline: list[TrialResult], allow_changed: bool = False) -> Gate:
    here, base = defaultdict(list), defaultdict(list)
    for t in now:
        here[t.task].append(t)
    for t in baseline:
        base[t.task].append(t)
    result = Gate(only_here=sorted(set(here) - set(base)), only_baseline=sorted(set(base) - set(here)))
    for task in sorted(set(here) & set(base)):
        if {t.content_hash for t in here[task]} != {t.content_hash for t in base[task]}:
            result.changed.append(task)
    if result.changed and not allow_changed:
        raise InputError([f"--baseline: task {task} ran different content in the two jobs "
                          "(content hash differs); pass --allow-changed to compare anyway"
                          for task in result.changed])
    for task in sorted(set(here) & set(base)):
        layer = here[task][0].layer or "-"
        before, after = _passed(base[task]), _passed(here[task])
        if before and not after:
            result.regressions.setdefault(layer, []).append(task)
        elif after and not before:
            result.improvements.setdefault(layer, []).append(task)
    return result
