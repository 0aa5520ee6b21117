"""One trial, phase by phase: the lifecycle (run_trial, TrialContext), its images and bases,
sandbox, agent and workers, collection, verification, steps and the audit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.trial.atif import TrialFacts, build_atif
    from orchestrator.trial.baseimage import BASE_VERSION, BOOTSTRAP_RELEASES, bootstrap_base
    from orchestrator.trial.bases import base_references, stand_in_for
    from orchestrator.trial.context import (
        TrialContext,
        cancelled_result,
        new_result,
        trial_dir,
        trial_id,
    )
    from orchestrator.trial.imagecache import ImageCache, Published
    from orchestrator.trial.images import TaskImages, ensure_task_images
    from orchestrator.trial.lifecycle import run_trial
    from orchestrator.trial.trust import trust_for
    from orchestrator.trial.verify import EnvTemplateError, resolve_env

__all__ = [
    "BASE_VERSION", "BOOTSTRAP_RELEASES", "EnvTemplateError", "ImageCache", "Published",
    "TaskImages", "TrialContext", "TrialFacts", "base_references", "bootstrap_base", "build_atif",
    "cancelled_result", "ensure_task_images", "new_result", "resolve_env", "run_trial",
    "stand_in_for", "trial_dir", "trial_id", "trust_for",
]
__getattr__, __dir__ = public_face(__name__, {
    "TrialFacts": "atif",
    "build_atif": "atif",
    "BASE_VERSION": "baseimage",
    "BOOTSTRAP_RELEASES": "baseimage",
    "bootstrap_base": "baseimage",
    "TrialContext": "context",
    "cancelled_result": "context",
    "new_result": "context",
    "trial_dir": "context",
    "trial_id": "context",
    "ImageCache": "imagecache",
    "Published": "imagecache",
    "TaskImages": "images",
    "base_references": "bases",
    "ensure_task_images": "images",
    "stand_in_for": "bases",
    "run_trial": "lifecycle",
    "trust_for": "trust",
    "EnvTemplateError": "verify",
    "resolve_env": "verify",
})
