"""Task images per job (or per Ray node): each built at most once, one builder per image."""

from __future__ import annotations

import threading

from orchestrator.cleanup import touch_images
from orchestrator.images import TaskImages, ensure_task_images
from orchestrator.runtime.base import Runtime
from orchestrator.tasks import Task


class ImageCache:
    """Task images per job: built at most once, one builder per image."""

    def __init__(self, runtime: Runtime, job: str, install: str | None = None,
                 ca_bundle: bytes | None = None, build_policy: str = "prefer-prebuilt"):
        self.runtime, self.job, self.install = runtime, job, install
        self.ca_bundle, self.build_policy = ca_bundle, build_policy
        self._done: dict[str, TaskImages] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.built = 0

    def __call__(self, task: Task) -> TaskImages:
        with self._guard:
            lock = self._locks.setdefault(task.name, threading.Lock())
        with lock:
            if task.name not in self._done:
                images = ensure_task_images(self.runtime, task, self.job, self.install,
                                            self.ca_bundle, self.build_policy)
                with self._guard:
                    self.built += images.built
                self._done[task.name] = images
                touch_images([images.task_image, images.agent_image])
            return self._done[task.name]
