"""Progress for long runs: rate and ETA from this run's trials only (a resumed job's
earlier half is not in the rate), failures by mode, one JSON object per trial when asked."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from rich.console import Console

from orchestrator.models.events import Planned, TrialFinished
from orchestrator.report.progress import Progress, _duration


def result(i: int, mode: str = "none") -> SimpleNamespace:
    return SimpleNamespace(trial_id=f"t{i}", task=f"ds/t{i}", attempt=0, reward=None if mode != "none" else {"reward": 1},
                           headline=1.0 if mode == "none" else 0.0,
                           failure_mode=SimpleNamespace(value=mode))


def test_json_lines_carry_rate_eta_and_failures_by_mode(capsys, monkeypatch):
    now = [0.0]
    monkeypatch.setattr("orchestrator.report.progress.time.monotonic", lambda: now[0])
    progress = Progress(Console(file=io.StringIO()), json_lines=True)
    progress.plan(Planned(total=1000, done=500))  # a resumed job: half done before
    for i, mode in enumerate(("none", "agent_timeout", "infra_error"), start=1):
        now[0] = 60.0 * i  # a trial a minute
        progress.trial_done(TrialFinished(result(i, mode), 500 + i, 1000))
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["done"] for line in lines] == [501, 502, 503]
    assert lines[0]["rate_per_min"] == 1.0 and lines[0]["eta_seconds"] == 499 * 60  # not 501/min
    assert lines[2]["rate_per_min"] == 1.0 and lines[2]["failed"] == {"agent_timeout": 1, "infra_error": 1}
    assert lines[1]["reward"] is None and lines[1]["failure_mode"] == "agent_timeout"


def test_plain_lines_say_rate_eta_and_failures(capsys):
    progress = Progress(Console(file=io.StringIO()), live=False)
    progress.plan(Planned(total=3, done=0))
    progress.trial_done(TrialFinished(result(1, "oom"), 1, 3))
    err = capsys.readouterr().err
    assert err.startswith("[1/3] ds/t1#0: reward - (oom)") and "failed: oom 1" in err and "/min, ETA " in err


def test_durations_read_as_people_write_them():
    assert [_duration(s) for s in (42, 380, 7500)] == ["42s", "6m20s", "2h05m"]
