"""State shared by the jobs on this host: the network pool, the disk watchdog, clean-up
and image pruning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.host.cleanup import (
        LABEL_JOB,
        own,
        owner_labels,
        plan,
        prune_images,
        reap,
        reap_orphans,
        remaining,
        touch_images,
    )
    from orchestrator.host.netpool import NetworkPool, remove_idle
    from orchestrator.host.watchdog import DiskWatchdog

__all__ = [
    "LABEL_JOB", "DiskWatchdog", "NetworkPool", "own", "owner_labels", "plan", "prune_images",
    "reap", "reap_orphans", "remaining", "remove_idle", "touch_images",
]
__getattr__, __dir__ = public_face(__name__, {
    "LABEL_JOB": "cleanup",
    "own": "cleanup",
    "owner_labels": "cleanup",
    "plan": "cleanup",
    "prune_images": "cleanup",
    "reap": "cleanup",
    "reap_orphans": "cleanup",
    "remaining": "cleanup",
    "touch_images": "cleanup",
    "NetworkPool": "netpool",
    "remove_idle": "netpool",
    "DiskWatchdog": "watchdog",
})
