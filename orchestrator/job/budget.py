"""The disk of a long run: task images held to a budget while the job runs, and the
engine's data root watched so a filling disk stops the job with its reason, not its trials
with confusing errors.

- `--image-budget-gb N`: after trials finish (at most every `interval` seconds), orchestra's
  task and agent images on this engine are pruned least recently used first until they fit
  N GB (host/cleanup.prune_images). Never pruned: the images of this job's tasks that still
  have trials running or queued, the offline bases, and images another job used within the
  last hour (each job says every 10 minutes which images it uses). A pruned task's images
  are made again if it runs again (a resumed job).
- The engine's data root (where images and writable layers live, read when the engine shares
  this host): below WARN_FREE of its size free, the job says so once; below STOP_FREE (or
  under STOP_FREE_BYTES) it stops as infrastructure with the reason (exit 3), results kept,
  so `--resume` goes on after space is made.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from orchestrator.errors import InfraError
from orchestrator.host import prune_images
from orchestrator.log import get_logger
from orchestrator.runtime import EngineFacts, Runtime
from orchestrator.trial import ImageCache

log = get_logger()
WARN_FREE = 0.10  # share of the data root's filesystem
STOP_FREE = 0.02
STOP_FREE_BYTES = 1024 ** 3
SPARE_OTHERS_SEC = 3600.0


class EngineDiskFull(InfraError):
    """The engine's data root is nearly full: the job stops, results kept."""


class DiskBudget:
    def __init__(self, runtime: Runtime, images: ImageCache, pending: Counter[str],
                 budget_gb: float | None, facts: EngineFacts | None = None, interval: float = 10.0):
        """`pending`: trials not yet final per task name (this object counts them down)."""
        self.runtime, self.images, self.pending = runtime, images, pending
        self.budget_gb, self.facts, self.interval = budget_gb, facts, interval
        self.pruned: list[str] = []
        self.mine: set[str] = set()  # image references of this job's finished tasks
        self.warned = False
        self._last = 0.0
        self._lock = threading.Lock()

    def trial_done(self, task_name: str) -> None:
        """A trial of `task_name` is final: check the disk, and prune if it is time."""
        with self._lock:
            self.pending[task_name] -= 1
            if time.monotonic() - self._last < self.interval:
                return
            self._last = time.monotonic()
            self.check_data_root()
            if self.budget_gb is not None:
                self._prune()

    def finish(self) -> None:
        """After the job's clean-up: what the last trials' containers still held goes now."""
        if self.budget_gb is not None:
            with self._lock:
                self._prune()

    def _prune(self) -> None:
        needed = self.images.refs(name for name, n in self.pending.items() if n > 0)
        finished = [name for name, n in self.pending.items() if n <= 0]
        # remembered past `forget`: a parent refused once (its child's container was still
        # going) is this job's to prune the next time
        self.mine |= self.images.refs(finished)
        removed = prune_images(self.runtime, self.budget_gb, keep=needed,
                               spare_used_within_sec=SPARE_OTHERS_SEC, mine=frozenset(self.mine - needed))
        if removed:
            gone = {tag for image in removed for tag in image.tags}
            names = [(image.tags or [image.id])[0] for image in removed]
            self.pruned += names
            for name in finished:  # a task whose image went is built again if it runs again
                if self.images.refs([name]) & gone:
                    self.images.forget(name)
            log.info("images.pruned", images=names, budget_gb=self.budget_gb)

    def check_data_root(self) -> None:
        space = self.runtime.data_root_space(self.facts)
        if space is None:
            return
        free, total = space
        where = self.facts.data_root if self.facts else "the engine's data root"
        if total and (free < STOP_FREE * total or free < STOP_FREE_BYTES):
            raise EngineDiskFull(
                f"the engine's disk is nearly full ({where}: {free / 1024 ** 3:.1f} GB free of "
                f"{total / 1024 ** 3:.0f} GB); the job stopped before its trials fail for it. "
                "Results already written are intact: free space (`orchestra cleanup --images "
                "--keep-gb N`, or --image-budget-gb on the next run) and resume with "
                "`orchestra run --resume JOB_DIR`.")
        if total and free < WARN_FREE * total and not self.warned:
            self.warned = True
            log.warning("engine.disk_low", data_root=where, free_gb=round(free / 1024 ** 3, 1),
                        message=f"the engine's disk is filling ({where}: {free / 1024 ** 3:.1f} GB "
                                f"free of {total / 1024 ** 3:.0f} GB); the job stops below "
                                f"{STOP_FREE:.0%}. --image-budget-gb keeps task images in bounds")
