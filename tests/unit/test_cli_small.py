"""Small CLI findings: the exit-4 message names every kind of answer leak; --help shows a
flag without a value (no `<bool>`) on a terminal-like render."""

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.api import RunOutcome, RunRequest
from orchestrator.cli.commands import app
from orchestrator.cli.run import Shown, _render_and_gate
from orchestrator.models.result import JobResult


def test_the_answer_leak_exit_names_tests_solutions_and_memory_sources(tmp_path, capsys):
    job = JobResult(job="j", condition="c", condition_hash="h", agent="oracle", policy="memory-off",
                    k=1, n_trials=1, counts={"answer_leak": 1})
    (tmp_path / "j" / "trials").mkdir(parents=True)
    with pytest.raises(typer.Exit) as stopped:
        _render_and_gate(RunOutcome(request=RunRequest(path=Path("ds"), jobs_dir=tmp_path, job_name="j"),
                                    job_dir=tmp_path / "j", job=job, trials=[], exit_code=4), Shown())
    assert stopped.value.exit_code == 4
    said = " ".join(capsys.readouterr().err.split())
    assert "answer leak in 1 trial(s)" in said
    for kind in ("tests", "solution", "memory source files"):
        assert kind in said, said


def every_help(monkeypatch) -> dict[str, str]:
    """Each command's --help as a terminal shows it (typer's rich panels; COLUMNS unset)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(app, "rich_markup_mode", "rich")
    commands = [[], ["run"], ["report"], ["compare"], ["view"], ["agents"], ["cleanup"],
                ["tasks"], ["tasks", "check"], ["tasks", "doctor"], ["images"], ["images", "bootstrap"]]
    out = {}
    for words in commands:
        result = CliRunner().invoke(app, [*words, "--help"], terminal_width=200)
        assert result.exit_code == 0, result.output
        assert "╭─ Options" in result.output  # the rich render, as on a terminal
        out[" ".join(words) or "orchestra"] = result.output
    return out


def test_help_shows_flags_without_a_value(monkeypatch):
    helps = every_help(monkeypatch)
    for command, text in helps.items():
        assert "<bool>" not in text, f"{command} --help:\n{text}"
    assert re.search(r"│ --version +Print orchestra's version", helps["orchestra"]), helps["orchestra"]
    assert re.search(r"│ --retry-errors +With --resume", helps["run"]), helps["run"]
    assert re.search(r"│ --skip-broken +Leave out", helps["run"])
    assert re.search(r"│ --n-concurrent +-n +<int range>", helps["run"])  # options with a value keep theirs


def test_flags_still_take_no_value():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("orchestra ")


def test_run_help_names_every_agent_run_takes(monkeypatch):
    """`--agent`'s help is written out (the CLI does not import the agents to start); it
    names every agent `run --agent` takes, so a new one cannot be left out of it."""
    from orchestrator.models import AGENT_NAMES

    text = " ".join(every_help(monkeypatch)["run"].replace("│", " ").split())
    missing = [name for name in AGENT_NAMES if not re.search(rf"[(| ]{re.escape(name)}[ |)]", text)]
    assert missing == [], text[:3000]
