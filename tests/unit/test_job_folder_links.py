"""A job folder made elsewhere is input (issue 56): every file orchestra writes into one is
written without following a link (a temporary name in the folder and a rename, or
O_NOFOLLOW), and a link where orchestra writes is refused naming it (exit 2, no
traceback), its target left as it was. Each test first puts the link in place."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import InputError
from orchestrator.job.joblock import LOCK_NAME, PID_NAME, hold_job, holder
from orchestrator.models.result import trial_folder_name
from orchestrator.util import write_atomic, write_json_atomic

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
DATA = Path(__file__).parent / "data" / "results"
PRECIOUS = "the user's own file\n"


def precious(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(PRECIOUS)
    return target


def linked(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    assert link.is_symlink() and link.read_text() == PRECIOUS  # the attack is in place
    return link


def job_folder(tmp_path: Path) -> Path:
    """A finished job's folder (the recorded results of tests/unit/data/results)."""
    from orchestrator.models.result import TrialResult

    job = tmp_path / "jobs" / "made-elsewhere"
    job.mkdir(parents=True)
    shutil.copy(DATA / "job.json", job / "result.json")
    for name in ("trial-relay", "trial-roster"):
        result = TrialResult.model_validate_json((DATA / f"{name}.json").read_text())
        folder = job / "trials" / trial_folder_name(result.task, result.trial_id)
        folder.mkdir(parents=True)
        shutil.copy(DATA / f"{name}.json", folder / "result.json")
    return job


@pytest.mark.parametrize("name", ["report.md", "report.html"])
def test_orchestra_report_refuses_a_linked_report_file(tmp_path, name):
    """Before: report.md's link was followed and its target overwritten with the report."""
    job = job_folder(tmp_path)
    target = precious(tmp_path)
    linked(job / name, target)
    proc = subprocess.run([ORCHESTRA, "report", str(job)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert "Traceback" not in said and str(job / name) in said and "link" in said
    assert target.read_text() == PRECIOUS and (job / name).is_symlink()


def test_an_unlinked_report_is_still_written(tmp_path):
    job = job_folder(tmp_path)
    proc = subprocess.run([ORCHESTRA, "report", str(job)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ref-4fd8df92" in (job / "report.md").read_text() and (job / "report.html").is_file()


def test_resume_never_writes_its_pid_through_a_link(tmp_path):
    """Before: `run --resume` wrote its pid into the link's target."""
    job = tmp_path / "job"
    target = precious(tmp_path)
    linked(job / PID_NAME, target)
    with pytest.raises(InputError) as caught:
        with hold_job(job):
            pass
    said = "\n".join(caught.value.problems)
    assert str(job / PID_NAME) in said and "link" in said
    assert target.read_text() == PRECIOUS
    assert holder(job) == "unknown"  # its target is never read into a message either


def test_a_linked_lock_file_is_refused_naming_it(tmp_path):
    """Before: the lock was opened through the link (an uncaught ELOOP or the target taken)."""
    job = tmp_path / "job"
    target = precious(tmp_path)
    linked(job / LOCK_NAME, target)
    with pytest.raises(InputError) as caught:
        with hold_job(job):
            pass
    said = "\n".join(caught.value.problems)
    assert str(job / LOCK_NAME) in said and "link" in said
    assert target.read_text() == PRECIOUS


def test_the_lock_still_holds_one_writer(tmp_path):
    job = tmp_path / "job"
    with hold_job(job):
        assert holder(job) == str(os.getpid())
        probe = ("import sys; from pathlib import Path; from orchestrator.job.joblock import hold_job\n"
                 "from orchestrator.errors import InputError\n"
                 "try:\n    hold_job(Path(sys.argv[1])).__enter__()\nexcept InputError as e:\n"
                 "    print('refused', e)\n")
        out = subprocess.run([sys.executable, "-c", probe, str(job)], capture_output=True, text=True,
                             timeout=60).stdout
        assert out.startswith("refused") and str(os.getpid()) in out
    assert not (job / PID_NAME).exists()


@pytest.mark.parametrize("writer", [write_atomic, write_json_atomic])
def test_an_atomic_write_refuses_a_link_where_it_writes(tmp_path, writer):
    """The rename would replace the link, not follow it; a link there is refused all the same."""
    target = precious(tmp_path)
    link = linked(tmp_path / "job" / "regressions.json", target)
    with pytest.raises(InputError, match="regressions.json: a link"):
        writer(link, {"a": 1} if writer is write_json_atomic else "text")
    assert link.is_symlink() and target.read_text() == PRECIOUS


def test_the_events_log_is_never_appended_through_a_link(tmp_path):
    """Before: `run --resume` appended the job's events to events.jsonl's target."""
    from orchestrator import log

    target = precious(tmp_path)
    link = linked(tmp_path / "job" / "events.jsonl", target)
    try:
        with pytest.raises(InputError, match="events.jsonl: a link"):
            log.configure(json_file=link)
    finally:
        log.configure()
    assert target.read_text() == PRECIOUS
