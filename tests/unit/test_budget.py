"""The disk of a long run (fakes for the engine; tests/integration/test_image_budget.py
shows it on the real one): pruning never takes what a pending trial needs, and a nearly
full data root warns, then stops the job."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from orchestrator.job import budget as budget_module
from orchestrator.job.budget import DiskBudget, EngineDiskFull
from orchestrator.runtime.base import EngineFacts

GB = 1024 ** 3


class Images:
    def __init__(self):
        self.done = {"a": ("a-task", "a-agent"), "b": ("b-task", "b-agent")}
        self.forgotten = []

    def refs(self, names):
        return frozenset(ref for n in names if n in self.done for ref in self.done[n])

    def forget(self, name):
        self.forgotten.append(name)


class Engine:
    def __init__(self, free, total=100 * GB):
        self.space, self.present = (free, total), {"a-task", "a-agent", "b-task", "b-agent"}

    def data_root_space(self, facts=None):
        return self.space


def test_only_finished_tasks_images_are_offered_to_the_pruner(monkeypatch):
    calls = []

    def prune(runtime, gb, keep, spare_used_within_sec, mine):
        calls.append((gb, keep, mine))
        gone = {"a-task", "a-agent"} - keep
        runtime.present -= gone
        return [SimpleNamespace(id=f"sha256:{ref}", tags=[ref]) for ref in sorted(gone)]

    monkeypatch.setattr(budget_module, "prune_images", prune)
    engine, images = Engine(free=50 * GB), Images()
    budget = DiskBudget(engine, images, Counter({"a": 2, "b": 1}), 5.0, interval=0)
    budget.trial_done("a")  # a still has a trial pending: both tasks' images are kept
    assert calls[-1] == (5.0, frozenset({"a-task", "a-agent", "b-task", "b-agent"}), frozenset())
    budget.trial_done("a")  # a is finished: its images may go, b's may not
    assert calls[-1] == (5.0, frozenset({"b-task", "b-agent"}), frozenset({"a-task", "a-agent"}))
    # what the pruner removed says which finished task to build again: no engine call per task
    assert images.forgotten == ["a"] and budget.pruned == ["a-agent", "a-task"]


def test_a_filling_data_root_warns_once_then_stops_the_job():
    facts = EngineFacts(cpus=2, memory_mb=1024, oci_runtimes=[], data_root="/var/lib/docker")
    engine = Engine(free=8 * GB)
    budget = DiskBudget(engine, Images(), Counter({"a": 5}), None, facts, interval=0)
    budget.trial_done("a")
    assert budget.warned
    engine.space = (1 * GB, 100 * GB)  # 1% free
    with pytest.raises(EngineDiskFull, match="/var/lib/docker: 1.0 GB free of 100 GB"):
        budget.trial_done("a")


def test_an_engine_elsewhere_is_not_read():
    engine = SimpleNamespace(data_root_space=lambda facts=None: None)
    DiskBudget(engine, Images(), Counter(), None).check_data_root()  # nothing to read: no error
