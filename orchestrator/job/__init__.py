"""Many trials: the job runner (plan, pre-flight, results), the scheduler, the engine
watch, the memory shadow, host needs and the task doctor."""

from orchestrator import public_face

__all__ = ["Admission", "EngineGone", "EngineWatch", "JobOptions", "MemoryShadow", "Scheduler", "memory_shadow", "preflight", "run_job", "summarize"]
__getattr__, __dir__ = public_face(__name__, {
    "JobOptions": "options",
    "run_job": "runner",
    "summarize": "summary",
    "preflight": "preflight",
    "Scheduler": "scheduler",
    "Admission": "scheduler",
    "EngineWatch": "enginewatch",
    "EngineGone": "enginewatch",
    "memory_shadow": "shadow",
    "MemoryShadow": "shadow",
})
