"""The Python API's request (orchestrator/api/runs.py RunRequest) and `orchestra run` cannot
drift: every flag of the command is a field of the request or one of the CLI's own (Shown),
each with the same default, and the CLI given no flags builds the request RunRequest() is.
The request's defaults are not read from the typer signature (api/ sits below cli/ and
may not import it), nor the signature's from the request (`orchestra --help` would then
build the pydantic model at start-up): this test holds them together instead."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.api import RunRequest
from orchestrator.cli import run as run_module
from orchestrator.cli.commands import app, run

ALIASES = {"old_runtime"}  # --runtime, the hidden old name of --oci-runtime (one field)


def cli_defaults() -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(run).parameters.items() if name not in ALIASES}


def test_every_flag_is_a_field_or_the_clis_own_and_nothing_else():
    shown = {f.name for f in fields(run_module.Shown)}
    assert set(cli_defaults()) == set(RunRequest.model_fields) | shown
    assert not shown & set(RunRequest.model_fields)


def test_the_request_has_the_clis_defaults():
    cli = cli_defaults()
    differ = {name: (cli[name], field.default) for name, field in RunRequest.model_fields.items()
              if cli[name] != field.default}
    assert differ == {}
    shown = {f.name: f.default for f in fields(run_module.Shown)}
    assert shown == {name: cli[name] for name in shown}


def test_the_cli_with_no_flags_builds_the_default_request(monkeypatch: pytest.MonkeyPatch):
    for name in ("ORCHESTRA_REGISTRY", "ORCHESTRA_CA_BUNDLE"):  # the two flags read from the env
        monkeypatch.delenv(name, raising=False)
    seen: list[tuple[RunRequest, run_module.Shown]] = []
    monkeypatch.setattr(run_module, "execute", lambda request, shown: seen.append((request, shown)))
    done = CliRunner().invoke(app, ["run", "--path", "tasks"])
    assert done.exit_code == 0, done.output
    ((request, shown),) = seen
    assert request == RunRequest(path=Path("tasks"))
    assert shown == run_module.Shown()


def test_the_request_refuses_what_the_cli_refuses():
    from pydantic import ValidationError

    for bad in ({"n_concurrent": 0}, {"order": "random"}, {"max_retries": -1}, {"no_such_flag": 1}):
        with pytest.raises(ValidationError):
            RunRequest(**bad)
