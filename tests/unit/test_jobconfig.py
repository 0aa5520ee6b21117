"""config.json, typed (models/jobconfig.py): what a job writes reads back to the same
condition; a damaged one is refused on --resume with the file and field named (exit 2)."""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from orchestrator.cli.commands import app
from orchestrator.models.jobconfig import JobConfig, JobSource, TaskRef
from orchestrator.models.manifest import Manifest, default_manifest


def written(tmp_path, **change) -> JobConfig:
    manifest = default_manifest("oracle")
    config = JobConfig(job="j", manifest=manifest.model_dump(mode="json", exclude_unset=True),
                       condition_hash=manifest.condition_hash(), k=2, trials=4,
                       source=JobSource(path=str(tmp_path), layer="regression"),
                       tasks=[TaskRef(name="ds/a", path=str(tmp_path / "a"), content_hash="h")])
    folder = tmp_path / "jobs" / "j"
    folder.mkdir(parents=True)
    data = json.loads(config.model_dump_json()) | change
    (folder / "config.json").write_text(json.dumps(data))
    return config


def test_a_written_config_reads_back_to_the_same_condition_and_keeps_unknown_keys(tmp_path):
    config = written(tmp_path, later_key={"x": 1})
    again = JobConfig.model_validate_json((tmp_path / "jobs/j/config.json").read_text())
    assert Manifest.model_validate(again.manifest).condition_hash() == config.condition_hash
    assert again.source.layer == "regression" and again.trials == 4 and again.tasks[0].name == "ds/a"
    assert json.loads(again.model_dump_json())["later_key"] == {"x": 1}


def test_a_damaged_config_is_refused_on_resume_naming_file_and_field(tmp_path):
    written(tmp_path, k="two")
    result = CliRunner().invoke(app, ["run", "--resume", str(tmp_path / "jobs/j")])
    assert result.exit_code == 2
    assert f"{tmp_path / 'jobs/j/config.json'}: field 'k'" in result.output


def test_a_damaged_manifest_in_the_config_is_named_under_manifest(tmp_path):
    written(tmp_path, manifest={"roster": "nobody"})
    result = CliRunner().invoke(app, ["run", "--resume", str(tmp_path / "jobs/j")])
    assert result.exit_code == 2 and "field 'manifest.roster'" in result.output


def test_a_long_path_in_an_error_stays_on_one_line_when_piped(tmp_path):
    """Off a terminal nothing is hard-wrapped: a 150-character path is one line a log
    search finds, whatever the temp folder's length."""
    import subprocess
    import sys

    deep = tmp_path / ("d" * (150 - len(str(tmp_path)) - 1))
    assert len(str(deep)) == 150
    piped = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()",
                            "run", "--resume", str(deep)], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert piped.returncode == 2, piped.stderr
    assert any(str(deep) in line for line in piped.stderr.splitlines()), piped.stderr
    usage = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()",
                            "run", "--path", str(deep), "--n-concurrent", "many"],
                           capture_output=True, text=True)
    assert usage.returncode == 2 and "╭" not in usage.stderr  # click's plain error, no box
    assert any("'--n-concurrent'" in line and "integer" in line for line in usage.stderr.splitlines())
