"""Read job results back for reports, with errors that name the file."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import InputError
from orchestrator.models import JobResult, TrialResult
from orchestrator.paths import JobDir


def load_job_result(path: Path) -> JobResult:
    file = JobDir(path).result if path.is_dir() else path
    if not file.is_file():
        raise InputError(f"{file}: no job result here")
    try:
        return JobResult.model_validate_json(file.read_text())
    except (ValidationError, ValueError) as exc:
        raise InputError(f"{file}: not a job result ({str(exc).splitlines()[0]})") from exc


def load_trials(job_dir: Path) -> list[TrialResult]:
    job = JobDir(job_dir)
    if not job.result.is_file() and not job.trials.is_dir():
        raise InputError(f"{job_dir}: not a job folder (no result.json, no trials/)")
    trials, problems = [], []
    for path in job.trial_results():
        try:
            trials.append(TrialResult.model_validate_json(path.read_text()))
        except (ValidationError, ValueError) as exc:
            problems.append(f"{path}: unreadable trial result ({str(exc).splitlines()[0]})")
    if problems:
        raise InputError(problems)
    return trials
