"""`orchestra cleanup` removes only what orchestra created: a container someone else made
from an image orchestra built inherits the image's orchestra labels, and is left alone by
`cleanup`, `cleanup --all` and their dry runs.

Alone on the engine (exclusive): `cleanup --all` removes every job's objects, live ones too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_task

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.tasks.load import load_tasks

pytestmark = pytest.mark.exclusive

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"


def test_cleanup_never_touches_what_orchestra_did_not_create(runtime, tmp_path):
    make_task(tmp_path / "ds", "t", toml=SMALL, solve="touch /app/ok\n")
    run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"),
            JobOptions(job_name="mine", jobs_dir=tmp_path / "jobs"))
    image = TrialResult.model_validate_json(
        next((tmp_path / "jobs/mine/trials").glob("*/result.json")).read_text()).image
    # Someone else's container from an image orchestra built: it inherits the image's labels.
    theirs = runtime.api.create_container(image, command=["sleep", "60"], name=f"not-orchestra-{os.getpid()}")["Id"]
    try:
        # positive control: it carries the labels it inherited from orchestra's image
        labels = runtime.api.inspect_container(theirs)["Config"]["Labels"] or {}
        assert any(key.startswith("orchestra.image.") for key in labels), labels
        for args in (["--dry-run", "--all"], ["--all"], []):
            proc = subprocess.run([ORCHESTRA, "cleanup", *args], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            assert theirs[:12] not in proc.stdout
            assert runtime.api.inspect_container(theirs)["Id"] == theirs
        dry = subprocess.run([ORCHESTRA, "cleanup", "--dry-run"], capture_output=True, text=True)
        assert "nothing removed (--dry-run)" in dry.stdout
    finally:
        runtime.api.remove_container(theirs, force=True)
