"""The API over written results: `orchestra report` (open_report; `--atif`: export_atif),
`compare` (compare_jobs) and `view` (serve_view). Each reads
job folders, judges what is asked (the regression gate) and returns typed objects; how
they are shown (tables, report.md/html, JUnit, JSON, `--atif`'s files) is the renderers'
(orchestrator.report).

    from orchestrator.api import open_report

    report = open_report(Path("jobs/today"), baseline=Path("jobs/yesterday"))
    report.job.mean_reward, report.gate.failed if report.gate else None

Errors: InputError (a missing or unreadable job folder, a bad gate option, a baseline with
nothing to compare), named by file and field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.models import CompareReport, JobResult, TrialResult
    from orchestrator.report import AtifExport, Gate
    from orchestrator.view import ViewServer


@dataclass
class JobReport:
    """A job folder, read: its result, its trials, the on/off comparison written into it
    (`compare --json` there), and the regression gate's verdict when a baseline was given."""

    job_dir: Path
    job: JobResult
    trials: list[TrialResult]
    compare: CompareReport | None = None  # the first readable compare*.json in the folder
    left_out: list[str] = field(default_factory=list)  # damaged compare*.json files, named
    gate: Gate | None = None  # with a baseline: also written to the job's regressions.json


def open_report(job_dir: Path, *, baseline: Path | None = None, fail_on_regression: bool = False,
                gate_layer: str | None = None, flaky: Literal["gate", "report", "ignore"] = "report",
                alpha: float = 0.05, allow_changed: bool = False) -> JobReport:
    """Read a job folder and, with a baseline, gate it (`orchestra report --help` gives the
    rule); the gate's verdict is written to the job's regressions.json.

    Raises:
        InputError: the job folder or the baseline cannot be read, fail_on_regression
            without a baseline, a bad gate option, nothing the gate could compare.
    """
    from orchestrator.report import load_job_result, load_trials

    job = load_job_result(job_dir)
    trials = load_trials(job_dir)
    if fail_on_regression and baseline is None:
        raise InputError("--fail-on-regression: needs --baseline JOB_DIR")
    report = JobReport(job_dir, job, trials)
    report.compare, report.left_out = _compare_in(job_dir)
    if baseline is not None:
        from orchestrator.report.gate import gate
        from orchestrator.util import write_json_atomic

        report.gate = gate(trials, load_trials(baseline), allow_changed, gate_layer, flaky, alpha)
        write_json_atomic(job_dir / "regressions.json", report.gate.as_dict())
    return report


def _compare_in(job_dir: Path) -> tuple[CompareReport | None, list[str]]:
    """The job's compare*.json (`orchestra compare --json` into it), for the report's on/off
    section; a damaged one is named and left out."""
    from pydantic import ValidationError

    from orchestrator.errors import validation_problems
    from orchestrator.models import CompareReport

    left_out: list[str] = []
    for path in sorted(job_dir.glob("compare*.json")):
        try:
            return CompareReport.model_validate_json(path.read_text()), left_out
        except ValidationError as exc:
            left_out.append(validation_problems(path, exc)[0])
    return None, left_out


def export_atif(job_dir: Path, out: Path) -> AtifExport:
    """Every trial's trajectory of `job_dir` in ATIF into the folder `out` (created): the
    agent/trajectory.atif.json collection wrote, or, for a trial without one, built now
    from its folder. The answer names the files copied and built, and the trials left out
    (no readable result.json).

    Raises:
        InputError: `job_dir` is not a folder.
        OSError: `out` cannot be written.
    """
    from orchestrator.report import export_atif as export

    if not job_dir.is_dir():
        raise InputError(f"{job_dir}: no such job folder")
    return export(job_dir, out)


def compare_jobs(first: Path, second: Path) -> CompareReport:
    """Paired memory-on vs memory-off comparison of two jobs (result.json or folder, either
    order).

    Raises:
        InputError: a job cannot be read, or the two are not an on/off pair.
    """
    from orchestrator.report import load_job_result
    from orchestrator.report.compare import compare

    return compare(load_job_result(first), load_job_result(second))


def serve_view(roots: list[Path], port: int = 0) -> ViewServer:
    """`orchestra view`'s web app over these job folders (or folders of jobs), started on
    127.0.0.1 (port 0: a free one); the caller stops it.

    Raises:
        InputError: a folder that does not exist (every one named).
    """
    from orchestrator.view import ViewServer

    missing = [str(p) for p in roots if not p.exists()]
    if missing:
        raise InputError([f"{p}: no such folder" for p in missing])
    return ViewServer(roots, port=port).start()
