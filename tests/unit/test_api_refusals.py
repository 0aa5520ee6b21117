"""The API's admin and results functions refuse bad input with orchestra's InputError,
naming the flag or file, before any engine is opened (no Docker here: a function that
opened one first would fail differently, with an InfraError or a hang)."""

from pathlib import Path

import pytest

from orchestrator.api import (
    bootstrap_bases,
    clean_up,
    cleanup_plan,
    compare_jobs,
    doctor_tasks,
    install_agents,
    list_agents,
    open_report,
    serve_view,
)
from orchestrator.errors import InputError


@pytest.fixture(autouse=True)
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a runtime here is the defect these tests look for."""
    import orchestrator.runtime

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an engine was opened before the input was checked")

    monkeypatch.setattr(orchestrator.runtime, "open_runtime", refuse)


def test_bad_admin_input_is_refused_by_name_before_the_engine(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--job and --all: choose one"):
        cleanup_plan(job="j", everything=True)
    with pytest.raises(InputError, match="--job and --all: choose one"):
        clean_up(job="j", everything=True)
    with pytest.raises(InputError, match="--release: 'jessie' is not one of"):
        bootstrap_bases(["bookworm", "jessie"])
    with pytest.raises(InputError, match="--install: 'nope' is not one of"):
        install_agents(["nope"])
    with pytest.raises(InputError, match="--ca-bundle: .*no such file"):
        doctor_tasks(tmp_path, ca_bundle=tmp_path / "missing.pem")
    install_agents([])  # nothing asked, nothing done


def test_bad_results_input_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such folder"):
        serve_view([tmp_path, tmp_path / "gone"])
    with pytest.raises(InputError):
        open_report(tmp_path / "no-job")
    with pytest.raises(InputError):
        compare_jobs(tmp_path / "a", tmp_path / "b")


def test_list_agents_lists_the_built_in_ones_first_then_the_installed_clis() -> None:
    from orchestrator.agents import INSTALLED

    rows = list_agents()
    built_in = [row.name for row in rows if row.kind == "built-in"]
    assert built_in[:3] == ["oracle", "nop", "reference"]
    assert [row.name for row in rows] == built_in + list(INSTALLED)  # built-in first, each once
    assert all(row.kind.startswith("installed") for row in rows[len(built_in):])


def test_the_guard_sees_an_engine_opened() -> None:
    """The check sees what it checks: valid input goes on to open the engine, and is stopped."""
    with pytest.raises(AssertionError, match="an engine was opened"):
        cleanup_plan(job="j")
