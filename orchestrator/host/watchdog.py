"""The writable-layer watchdog: the disk quota for everything outside the loop volumes."""

from __future__ import annotations

import threading

from orchestrator.log import get_logger
from orchestrator.runtime import Runtime

log = get_logger()


class DiskWatchdog:
    """One thread per job polls the writable-layer size of the job's running containers
    (one API call for all of them) and kills any container past its storage quota."""

    def __init__(self, runtime: Runtime, job: str, interval: float = 1.0):
        self.runtime, self.job, self.interval = runtime, job, interval
        self._limits: dict[str, int] = {}
        self._tripped: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="disk-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def register(self, container: str, storage_mb: int) -> None:
        with self._lock:
            self._limits[container] = storage_mb * 1024 * 1024

    def rearm(self, container: str, limit_bytes: int) -> None:
        """Watch a container again with a new limit (a restarted container, graded live)."""
        with self._lock:
            self._tripped.discard(container)
            self._limits[container] = limit_bytes

    def unregister(self, container: str) -> None:
        with self._lock:
            self._limits.pop(container, None)

    def tripped(self, container: str) -> bool:
        with self._lock:
            return container in self._tripped

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                if not self._limits:
                    continue
            try:
                sizes = self.runtime.writable_layer_bytes(self.job)
            except Exception as exc:
                log.warning("watchdog.poll_failed", error=str(exc))
                continue
            for container, size in sizes.items():
                with self._lock:
                    limit = self._limits.get(container)
                    over = limit is not None and size > limit and container not in self._tripped
                    if over:
                        self._tripped.add(container)
                if over:
                    log.warning("watchdog.disk_limit", container=container[:12], bytes=size,
                                limit=limit)
                    self.runtime.kill(container)
