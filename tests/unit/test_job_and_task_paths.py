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


def test_a_steps_parts_and_the_tasks_tests(tmp_path: Path) -> None:
    paths = TaskPaths(make_task(tmp_path, "t"))
    assert paths.test_sh.is_file() and paths.test_sh == paths.tests / "test.sh"
    step = paths.step("one")
    assert (step.instruction, step.test_sh, step.solve_sh) == (
        paths.root / "steps/one/instruction.md", paths.root / "steps/one/tests/test.sh",
        paths.root / "steps/one/solution/solve.sh")


def test_a_trial_found_by_its_id_and_the_folders_of_a_job(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    assert job.trial_folders() == [] and job.find_trial("a" * 64) is None  # no trials/ yet
    mine = job.trial(trial_folder_name("ds/t", "ab" * 32))
    mine.verifier.mkdir(parents=True)
    mine.verifier_stdout.write_text("ok\n")
    (tmp_path / "elsewhere").mkdir()
    (job.trials / "linked__cdcdcdcdcdcd").symlink_to(tmp_path / "elsewhere")  # never followed
    (job.trials / "stray.txt").write_text("")
    assert job.find_trial("ab" * 32) == mine.root and job.find_trial("ff" * 32) is None
    assert job.trial_folders() == [mine.root]
    assert mine.verifier_stdout == mine.root / "verifier/test-stdout.txt"
    (mine.root / "steps/s1/verifier").mkdir(parents=True)
    (mine.root / "steps/s1/verifier/test-stdout.txt").write_text("s1\n")
    assert mine.step_verifier_stdouts() == [mine.root / "steps/s1/verifier/test-stdout.txt"]
    assert (job.events.name, mine.agent_stdout.relative_to(mine.root).as_posix(),
            mine.agent_stderr.relative_to(mine.root).as_posix()) == (
        "events.jsonl", "agent/stdout.txt", "agent/stderr.txt")


def test_replay_from_needs_a_trial_folder_with_recorded_exchanges(tmp_path: Path) -> None:
    from orchestrator.api.runs import _recorded_exchanges

    job = JobDir(tmp_path / "job")
    assert not _recorded_exchanges(job.root)  # no trials/ at all
    recorded = job.trial("t__aaaaaaaaaaaa").root / "model"
    (tmp_path / "elsewhere/model").mkdir(parents=True)
    (tmp_path / "elsewhere/model/exchanges.jsonl").write_text("{}\n")
    job.trials.mkdir(parents=True)
    (job.trials / "linked__bbbbbbbbbbbb").symlink_to(tmp_path / "elsewhere")  # a link is not the job's
    assert not _recorded_exchanges(job.root)
    recorded.mkdir(parents=True)
    (recorded / "exchanges.jsonl").write_text("{}\n")
    assert _recorded_exchanges(job.root)
