"""Results for people and pipelines: the results table at the end of `orchestra run`
(summary), a job's aggregates (tables: per task, layer, class, failure mode, timings),
report.md and a self-contained report.html (render, with templating and templates/), the
paired memory-on vs off comparison (compare), JUnit XML (junit), every trial's trajectory
in ATIF into one folder (atif), the regression gate against a baseline job (gate) and how
many attempts it needs to tell a drop (attempts, `-k auto`), the live
progress of a running job (progress), and reading
job results back with errors that name the file (load)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.report.atif import AtifExport, export_atif
    from orchestrator.report.attempts import AttemptsPlan, attempts_to_tell
    from orchestrator.report.compare import verdict
    from orchestrator.report.gate import (
        Gate,
        TaskKey,
        check_comparable,
        check_options,
    )
    from orchestrator.report.junit import write_junit
    from orchestrator.report.load import load_job_result, load_trials
    from orchestrator.report.progress import Progress
    from orchestrator.report.render import sections, to_html
    from orchestrator.report.summary import render_job, render_problems
    from orchestrator.report.templating import esc, href, q, visible

__all__ = [
    "AtifExport", "AttemptsPlan", "Gate", "Progress", "TaskKey", "attempts_to_tell", "check_comparable", "check_options", "esc",
    "export_atif", "href", "load_job_result", "load_trials", "q", "render_job", "render_problems",
    "sections", "to_html", "verdict", "visible", "write_junit",
]
__getattr__, __dir__ = public_face(__name__, {
    "AtifExport": "atif",
    "export_atif": "atif",
    "AttemptsPlan": "attempts",
    "attempts_to_tell": "attempts",
    "verdict": "compare",
    "Gate": "gate",
    "TaskKey": "gate",
    "check_comparable": "gate",
    "check_options": "gate",
    "write_junit": "junit",
    "load_job_result": "load",
    "load_trials": "load",
    "Progress": "progress",
    "sections": "render",
    "to_html": "render",
    "render_job": "summary",
    "render_problems": "summary",
    "esc": "templating",
    "href": "templating",
    "q": "templating",
    "visible": "templating",
})
