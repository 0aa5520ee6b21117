"""orchestra's Python API: every command of the CLI as a typed function, without the command
line. The CLI parses, calls one of these and renders what it returns; a pipeline written in
Python calls the same functions and gets the same answers, verdicts and exit codes.

- `runs`: `orchestra run`: RunRequest (its options) -> run() -> RunOutcome (the job, its
  trials, the gate's verdict, the exit code).
- `admin`: `tasks check` (check_tasks), `tasks doctor` (doctor_tasks), `images bootstrap`
  (bootstrap_bases), `agents` (install_agents, list_agents), `cleanup` (cleanup_plan,
  clean_up).
- `results`: `report` (open_report; `--atif`: export_atif), `compare` (compare_jobs), `view`
  (serve_view).

Every function raises the one exception tree's errors (orchestrator.errors): InputError
(the CLI's exit 2) names the flag or file, InfraError (exit 3) is the engine or the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.api.admin import (
        BaseReady,
        CheckedTask,
        Cleaned,
        CleanupPlan,
        ListedAgent,
        ObjectInScope,
        Removed,
        TasksCheck,
        bootstrap_bases,
        check_tasks,
        clean_up,
        cleanup_plan,
        doctor_tasks,
        install_agents,
        list_agents,
    )
    from orchestrator.api.results import (
        JobReport,
        compare_jobs,
        export_atif,
        open_report,
        serve_view,
    )
    from orchestrator.api.runs import (
        ANSWER_LEAK,
        DONE,
        GATE_FAILED,
        GATE_REFUSED,
        RunOutcome,
        RunRequest,
        run,
    )

__all__ = [
    "ANSWER_LEAK", "DONE", "GATE_FAILED", "GATE_REFUSED", "BaseReady", "CheckedTask", "Cleaned",
    "CleanupPlan", "JobReport", "ListedAgent", "ObjectInScope", "Removed", "RunOutcome", "RunRequest", "TasksCheck",
    "bootstrap_bases", "check_tasks", "clean_up", "cleanup_plan", "compare_jobs", "doctor_tasks",
    "export_atif", "install_agents", "list_agents", "open_report", "run", "serve_view",
]
__getattr__, __dir__ = public_face(__name__, {
    "ANSWER_LEAK": "runs",
    "DONE": "runs",
    "GATE_FAILED": "runs",
    "GATE_REFUSED": "runs",
    "RunOutcome": "runs",
    "RunRequest": "runs",
    "run": "runs",
    "BaseReady": "admin",
    "CheckedTask": "admin",
    "Cleaned": "admin",
    "CleanupPlan": "admin",
    "ListedAgent": "admin",
    "ObjectInScope": "admin",
    "Removed": "admin",
    "TasksCheck": "admin",
    "bootstrap_bases": "admin",
    "check_tasks": "admin",
    "clean_up": "admin",
    "cleanup_plan": "admin",
    "doctor_tasks": "admin",
    "install_agents": "admin",
    "list_agents": "admin",
    "JobReport": "results",
    "compare_jobs": "results",
    "export_atif": "results",
    "open_report": "results",
    "serve_view": "results",
})
