"""Task images per job (or per Ray node): each built at most once, one builder per image.

With a registry (`--registry HOST/PREFIX`), the job builds each task's images once and
pushes the ones it built to `HOST/PREFIX/<local name>`; a Ray node given that record
(`adopt`) pulls them and tags them with their local names instead of building: its engine
never needs the task's bases, stand-ins or build context. A task image orchestra did not
build (Harbor's `docker_image`, used as it is) is not pushed: a node pulls it from where it
lives, as without a registry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from orchestrator.host import touch_images
from orchestrator.log import get_logger
from orchestrator.paths import verifier_dockerfile
from orchestrator.runtime import LABEL_IMAGE_KIND, BuildFailed, Runtime
from orchestrator.tasks import Task, hash_tree, image_repository
from orchestrator.trial.images import TaskImages, ensure_task_images, verifier_image
from orchestrator.trial.trust import Trust

log = get_logger()
TOUCH_EVERY_SEC = 600.0  # how often a job says it still uses its images (cleanup's LRU)
# A saying waits this long (or until the job ends) before it writes: the trial that asked is
# then waiting on the engine to start its container, not computing beside it (loading the
# file lock's module and writing cost 10-15 ms of CPU, measured).
TOUCH_DELAY_SEC = 0.25


def _registry_ref(registry: str, local: str) -> str:
    """Where a local image lives in the registry: `HOST/PREFIX/orchestra__task__x:tag`.
    Flat on purpose: Podman resolves a short name by suffix, so were the local name the
    tail of the registry's (`HOST/PREFIX/orchestra/task/x:tag`), tagging the pulled image
    with its local name would be a no-op there and the untag that follows would delete it."""
    repository, _, tag = local.rpartition(":")
    return f"{registry.rstrip('/')}/{repository.replace('/', '__')}:{tag}"


@dataclass
class Published:
    """What a node needs to run a task's trials from the registry: the job's TaskImages
    and, per local name, the registry reference it was pushed to."""

    images: TaskImages  # the driver's; a node validates it on receipt (executors/spec.py NodeRequest)
    refs: dict[str, str] = field(default_factory=dict)

    def task_images(self) -> TaskImages:
        """The node's copy: nothing built here (yet), nothing pulled."""
        return replace(self.images, built=0, pulled=[])


class ImageCache:
    """Task images per job: built at most once, one builder per image; pushed once to the
    registry when there is one; adopted from it on a node that was told where they are."""

    def __init__(self, runtime: Runtime, job: str, install: str | None = None,
                 ca_bundle: bytes | None = None, build_policy: str = "prefer-prebuilt",
                 registry: str | None = None, bases: str = "auto"):
        self.runtime, self.job, self.install, self.bases = runtime, job, install, bases
        self.ca_bundle, self.build_policy, self.registry = ca_bundle, build_policy, registry
        self._done: dict[str, TaskImages] = {}
        self._failed: dict[str, BuildFailed] = {}  # built ahead and failed: every trial says it
        self._published: dict[str, Published] = {}
        self._offered: dict[str, Published] = {}  # on a node: what the driver pushed
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._touched: dict[str, float] = {}  # task name -> when its images were last said used
        self._saying: list[threading.Thread] = []  # those sayings, off the trials' path
        self._ending = threading.Event()  # flush(): sayings still waiting write now
        self.built = 0
        self.pushed = 0
        self.pulled = 0

    def _lock(self, task: Task) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(task.name, threading.Lock())

    def __call__(self, task: Task) -> TaskImages:
        with self._lock(task):
            if (failed := self._failed.get(task.name)) is not None:
                raise failed  # the job's build pool tried once: no trial builds it again
            if task.name not in self._done:
                offered = self._offered.get(task.name)
                images = self._adopt(offered) if offered else ensure_task_images(
                    self.runtime, task, self.job, self.install, self.ca_bundle, self.build_policy,
                    self.bases)
                with self._guard:
                    self.built += images.built
                if self.registry and not offered:
                    self._published[task.name] = self._push(images)
                self._done[task.name] = images
                self._touched[task.name] = float("-inf")  # never: said at once
            if time.monotonic() - self._touched[task.name] > TOUCH_EVERY_SEC:  # in use, said now and
                self._touched[task.name] = time.monotonic()  # then: other jobs' budgets spare it
                refs = [self._done[task.name].task_image, self._done[task.name].agent_image]
                saying = threading.Thread(target=self._say_used, args=(refs,), name="touch", daemon=True)
                saying.start()
                with self._guard:  # the finished ones go: a long job says it every 10 minutes a task
                    self._saying = [t for t in self._saying if t.is_alive()] + [saying]
            return self._done[task.name]

    def ahead(self, task: Task, trust: Trust | None = None) -> int:
        """Every image the task's trials will use, before any of them starts (the job's
        build pool): the task image and agent layer, the separate verifier's
        tests/Dockerfile, each compose sidecar's (with their bases, pulled or stood in).
        A BuildFailed is kept: every trial of the task then records it from its build
        phase, and nothing builds it again in this job. Anything else (the engine failing
        mid-build) is not kept: the task's trials build what is missing themselves, under
        the job's engine watch. Returns how many task and agent images this call made."""
        from orchestrator.trial.sidecars import sidecar_image  # sidecars are rare: on use

        with self._guard:
            known = task.name in self._done
        try:
            images = self(task)
            if task.config.verifier.environment_mode == "separate" and not task.config.steps:
                verifier_image(self.runtime, task, images.task_image, self.job, trust)
            for name, service in (task.compose.sidecars if task.compose else {}).items():
                sidecar_image(self.runtime, task, name, service, self.job, trust)
        except BuildFailed as exc:
            with self._guard:
                self._failed.setdefault(task.name, exc)
            raise
        return 0 if known else images.built

    def likely_built(self) -> Callable[[Task], bool]:
        """Whether a task's images are most likely on the engine already, from one listing
        of orchestra's agent and verifier images by name (the build pool takes those in
        the job's order, not longest first). A guess only: `ahead` builds what is missing."""
        try:
            tags = {tag for kind in ("agent-image", "verifier-image")
                    for image in self.runtime.images_labelled(f"{LABEL_IMAGE_KIND}={kind}")
                    for tag in image.tags}
        except Exception:  # the engine will say so to the trials
            return lambda task: False

        def built(task: Task) -> bool:
            if task.config.environment.docker_image or (task.compose and task.compose.sidecars):
                return False
            if not any(t.startswith(f"{image_repository(task)}:{task.environment_hash}") for t in tags):
                return False
            tests = task.tests_dirs[-1] if task.tests_dirs else task.paths.tests
            if task.config.verifier.environment_mode == "separate" and verifier_dockerfile(tests).is_file():
                verifier = image_repository(task).replace("orchestra/task/", "orchestra/verifier/")
                return any(t.startswith(f"{verifier}:{hash_tree(tests)[:32]}") for t in tags)
            return True
        return built

    def _say_used(self, refs: list[str]) -> None:
        self._ending.wait(TOUCH_DELAY_SEC)
        touch_images(refs)

    def flush(self, timeout: float = 10.0) -> None:
        """Wait for the images' use to be written (the job's end)."""
        self._ending.set()
        with self._guard:
            saying, self._saying = self._saying, []
        for thread in saying:
            thread.join(timeout)

    def refs(self, task_names: Iterable[str]) -> frozenset[str]:
        """The image references of these tasks' images (those this cache has made)."""
        with self._guard:
            return frozenset(ref for name in task_names if name in self._done
                             for ref in (self._done[name].task_image, self._done[name].agent_image))

    def forget(self, task_name: str) -> None:
        """The task's images were pruned: the next trial of it (a resumed job's) makes them again."""
        with self._guard:
            self._done.pop(task_name, None)

    # ---- with a registry -----------------------------------------------------------------
    def publish(self, task: Task) -> Published:
        """The task's images, built here if need be and pushed: the record a node adopts."""
        self(task)
        return self._published[task.name]

    def offer(self, task_name: str, published: Published) -> None:
        """On a node: this task's images are to be pulled from the registry, not built."""
        with self._guard:
            self._offered.setdefault(task_name, published)

    def _push(self, images: TaskImages) -> Published:
        """Push what this job built. The task image only when it is orchestra's (built from
        the Dockerfile); the agent image always (it is made here)."""
        assert self.registry is not None
        local = [images.agent_image] + ([images.task_image] if images.source == "built" else [])
        refs = {}
        for name in local:
            remote = _registry_ref(self.registry, name)
            self.runtime.tag_image(name, remote)
            try:
                self.runtime.push(remote)
            finally:  # only the local name stays on this engine (cleanup knows those)
                self.runtime.remove_image(remote)
            refs[name] = remote
            with self._guard:
                self.pushed += 1
            log.info("image.pushed", image=name, to=remote)
        return Published(images=images, refs=refs)

    def _adopt(self, published: Published) -> TaskImages:
        """Pull what the registry has under its local names; an image already here is kept."""
        images = published.task_images()
        pulled = []
        for name in (images.agent_image, images.task_image):
            if self.runtime.image_exists(name):
                continue
            remote = published.refs.get(name)
            if remote is None:  # Harbor's docker_image: from where it lives
                self.runtime.pull(name)
            else:
                self.runtime.pull(remote)
                self.runtime.tag_image(remote, name)
                self.runtime.remove_image(remote)  # an untag: the local name holds it
            pulled.append(remote or name)
        with self._guard:
            self.pulled += len(pulled)
        images.pulled = pulled
        if pulled:
            log.info("image.adopted", images=pulled)
        return images
