"""`orchestra report --atif` goes through the API (orchestrator.api.export_atif): the CLI
renders the typed answer (report's AtifExport) and holds no export logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.api import export_atif
from orchestrator.errors import InputError
from orchestrator.models import TrialResult
from orchestrator.report import AtifExport


def _trial(job: Path, name: str) -> None:
    trial = job / "trials" / name
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / "instruction.md").write_text("Write hello.txt.")
    result = TrialResult(trial_id=name * 8, job="job", task="examples/hello-file", task_path="x",
                         content_hash="h", condition="c", condition_hash="ch", agent="oracle",
                         attempt=1, agent_exit_code=0)
    (trial / "result.json").write_text(result.model_dump_json())


def test_the_api_exports_every_trials_atif_and_answers_typed(tmp_path: Path) -> None:
    job = tmp_path / "job"
    _trial(job, "one")
    _trial(job, "two")
    (job / "trials" / "stray").mkdir()  # no result.json: named, left out
    export = export_atif(job, tmp_path / "out")
    assert isinstance(export, AtifExport) and export.folder == tmp_path / "out"
    assert export.written == 2 and export.copied == []
    assert [b.split(":")[0] for b in export.built] == ["one.json", "two.json"]
    assert [p.split(":")[0] for p in export.problems] == ["stray"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["one.json", "two.json"]


def test_a_missing_job_folder_is_an_input_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nowhere"):
        export_atif(tmp_path / "nowhere", tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written for it
