"""TaskPaths and JobDir (orchestrator/paths.py, beside TrialDir): a task's parts and a job's
files found by name, checked against a real task folder (conftest make_task) and the folder
a job on FakeRuntime writes."""

from __future__ import annotations

from pathlib import Path

from conftest import make_task

from orchestrator.models.result import trial_folder_name
from orchestrator.paths import JobDir, TaskPaths, TrialDir, verifier_dockerfile


def test_a_task_folders_parts(tmp_path: Path) -> None:
    paths = TaskPaths(make_task(tmp_path, "t", files={"tests/Dockerfile": "FROM python:3.12\n"}))
    for part in (paths.config, paths.instruction, paths.dockerfile, paths.solve_sh,
                 verifier_dockerfile(paths.tests)):
        assert part.is_file(), part
    assert paths.dockerfile.read_text().startswith("FROM python:3.12-slim-bookworm")
    assert (paths.environment, paths.solution) == (paths.root / "environment", paths.root / "solution")


def test_a_job_folders_files_and_its_trials(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    folders = [trial_folder_name("tasks/b", "f" * 64), trial_folder_name("tasks/a", "0" * 64)]
    for folder in folders:
        job.trial(folder).root.mkdir(parents=True)
        job.trial(folder).result.write_text("{}")
    (job.trials / "no-result").mkdir()  # a trial still running: no result.json yet
    assert job.trial_results() == sorted(job.trials / f / "result.json" for f in folders)
    assert job.trial(folders[0]) == TrialDir(tmp_path / "job" / "trials" / "b__ffffffffffff")
    assert (job.config.name, job.result.name) == ("config.json", "result.json")
