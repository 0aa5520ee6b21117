"""`orchestra run --oci-runtime` names the OCI runtime (runc, runsc); its old name
`--runtime` still works, hidden from --help (issue 47 item 6). Parsing only: the job's
`execute` is replaced, so nothing reaches an engine."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orchestrator.api import RunRequest
from orchestrator.cli import run as run_module
from orchestrator.cli.commands import app


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[RunRequest]:
    seen: list[RunRequest] = []
    monkeypatch.setattr(run_module, "execute", lambda request, shown: seen.append(request))
    return seen


@pytest.mark.parametrize("words", [["--oci-runtime", "runsc"], ["--runtime", "runsc"],
                                   ["--oci-runtime", "runsc", "--runtime", "runsc"]])
def test_both_spellings_set_the_same_option(parsed, words):
    done = CliRunner().invoke(app, ["run", "--path", "tasks", *words])
    assert done.exit_code == 0, done.output
    (args,) = parsed
    assert args.oci_runtime == "runsc"


def test_neither_leaves_it_to_the_manifest(parsed):
    assert CliRunner().invoke(app, ["run", "--path", "tasks"]).exit_code == 0
    assert parsed[0].oci_runtime is None


def test_two_different_values_are_refused(parsed):
    done = CliRunner().invoke(app, ["run", "--oci-runtime", "runsc", "--runtime", "runc"])
    assert done.exit_code == 2 and parsed == []
    said = " ".join(word for word in done.output.split() if word != "│")  # rich wraps it in a box
    assert "Invalid value for --oci-runtime: 'runsc', but --runtime (its old name) says 'runc'" in said


def test_help_documents_the_new_name_only():
    shown = CliRunner().invoke(app, ["run", "--help"], terminal_width=200).output
    assert "--oci-runtime" in shown and "--runtime " not in shown
