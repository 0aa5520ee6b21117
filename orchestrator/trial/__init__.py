"""One trial, phase by phase: the lifecycle (run_trial, TrialContext), its images,
sandbox, agent and workers, collection, verification, steps and the audit."""

from orchestrator import public_face

__all__ = ["ImageCache", "TaskImages", "TrialContext", "ensure_task_images", "run_trial", "trial_dir", "trial_id"]
__getattr__, __dir__ = public_face(__name__, {
    "TrialContext": "context",
    "run_trial": "lifecycle",
    "trial_dir": "context",
    "trial_id": "context",
    "ImageCache": "imagecache",
    "ensure_task_images": "images",
    "TaskImages": "images",
})
