"""Many trials: the job runner (plan, pre-flight, results), the scheduler, the engine
watch, the memory shadow, host needs and the task doctor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.job.doctor import Diagnosis, diagnose, invalid, skipped_by_run
    from orchestrator.job.durations import measured
    from orchestrator.job.enginewatch import EngineGone, EngineWatch
    from orchestrator.job.joblock import hold_job
    from orchestrator.job.options import JobOptions
    from orchestrator.job.preflight import REQUIRABLE
    from orchestrator.job.runner import run_job
    from orchestrator.job.scheduler import Admission, Scheduler
    from orchestrator.job.shadow import MemoryShadow, memory_shadow
    from orchestrator.job.summary import summarize

__all__ = [
    "REQUIRABLE", "Admission", "Diagnosis", "EngineGone", "EngineWatch", "JobOptions", "MemoryShadow",
    "Scheduler", "diagnose", "hold_job", "invalid", "measured", "memory_shadow", "run_job",
    "skipped_by_run", "summarize",
]
__getattr__, __dir__ = public_face(__name__, {
    "Diagnosis": "doctor",
    "diagnose": "doctor",
    "invalid": "doctor",
    "skipped_by_run": "doctor",
    "measured": "durations",
    "EngineGone": "enginewatch",
    "EngineWatch": "enginewatch",
    "hold_job": "joblock",
    "JobOptions": "options",
    "REQUIRABLE": "preflight",
    "run_job": "runner",
    "Admission": "scheduler",
    "Scheduler": "scheduler",
    "MemoryShadow": "shadow",
    "memory_shadow": "shadow",
    "summarize": "summary",
})
