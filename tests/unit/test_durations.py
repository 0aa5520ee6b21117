"""Longest first: durations measured from results, recorded per agent by task content,
and the order they give (unknown first, then longest first)."""

from __future__ import annotations

from orchestrator.job import durations
from orchestrator.models.result import TrialResult


def trial(content_hash: str, seconds: float, mode: str = "none", agent: str = "oracle") -> TrialResult:
    return TrialResult(trial_id=f"{content_hash}{seconds}", job="j", task=f"ds/{content_hash}", task_path="/t",
                       content_hash=content_hash, condition="c", condition_hash="h", policy="memory-on", attempt=0, agent=agent, failure_mode=mode, started_at=100.0,
                       finished_at=100.0 + seconds)


def test_medians_per_task_content_over_trials_that_ran():
    trials = [trial("a", 10), trial("a", 30), trial("a", 20), trial("b", 2),
              trial("c", 99, mode="cancelled"), trial("d", 5, agent="nop")]
    assert durations.measured(trials, "oracle") == {"a": 20.0, "b": 2.0}
    assert durations.measured(trials) == {"a": 20.0, "b": 2.0, "d": 5.0}


def test_recorded_per_agent_and_read_back(tmp_path, monkeypatch):
    monkeypatch.delenv("ORCHESTRA_DURATIONS", raising=False)
    monkeypatch.setenv("ORCHESTRA_CACHE", str(tmp_path))
    assert durations.recorded("oracle") == {}
    durations.record("oracle", durations.measured([trial("a", 4), trial("b", 8)], "oracle"))
    durations.record("nop", durations.measured([trial("a", 1, agent="nop")], "nop"))
    durations.record("oracle", durations.measured([trial("b", 6)], "oracle"))  # a later job's measure replaces the earlier
    assert durations.recorded("oracle") == {"a": 4.0, "b": 6.0}
    assert durations.recorded("nop") == {"a": 1.0}
    (tmp_path / "durations.json").write_text("not json")
    assert durations.recorded("oracle") == {}  # unreadable: nothing known, never an error


def test_unknown_first_then_longest_first_stable():
    items = ["short", "mystery", "long", "medium", "also-short", "mystery-2"]
    known = {"short": 1, "long": 60, "medium": 10, "also-short": 1}
    assert durations.longest_first(items, lambda i: i, known) == [
        "mystery", "mystery-2", "long", "medium", "short", "also-short"]


def test_the_record_keeps_the_newest_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_DURATIONS", str(tmp_path / "d.json"))
    monkeypatch.setattr(durations, "MAX_PER_AGENT", 2)
    durations.record("oracle", durations.measured([trial("a", 1), trial("b", 2)], "oracle"))
    durations.record("oracle", durations.measured([trial("c", 3)], "oracle"))
    durations.record("oracle", durations.measured([trial("b", 4)], "oracle"))
    assert durations.recorded("oracle") == {"c": 3.0, "b": 4.0}  # a, the oldest, went
    monkeypatch.setenv("ORCHESTRA_DURATIONS", "")
    durations.record("oracle", durations.measured([trial("z", 9)], "oracle"))
    assert durations.recorded("oracle") == {}
    assert "z" not in (tmp_path / "d.json").read_text()
