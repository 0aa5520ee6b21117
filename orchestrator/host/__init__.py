"""State shared by the jobs on this host: the network pool, the disk watchdog, clean-up
and image pruning."""

from orchestrator import public_face

__all__ = ["DiskWatchdog", "NetworkPool", "reap", "reap_orphans"]
__getattr__, __dir__ = public_face(__name__, {
    "NetworkPool": "netpool",
    "DiskWatchdog": "watchdog",
    "reap": "cleanup",
    "reap_orphans": "cleanup",
})
