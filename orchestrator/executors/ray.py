"""The Ray executor (DESIGN 6): each trial is a Ray task with `num_cpus` and `memory` from
the task's quotas, so Ray's scheduler places it; the trial runs end to end on that node,
against that node's Docker engine (images cached per node by content hash, one builder per
image per node), with its relay and model proxy on that node.

Task folders travel through Ray's object store (a tar per task, put once), never through a
shared filesystem. The trial's folder comes back to the driver as a tar with its result,
and the driver alone writes the job directory, so resume, reports and compare are unchanged.
A lost node surfaces as an infrastructure failure, retried by orchestra's own policy
(Ray's task retries are off, so nothing is counted twice).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from orchestrator.archive import safe_extract, tar_directory
from orchestrator.executors.spec import NodeReply, NodeRequest
from orchestrator.log import get_logger
from orchestrator.models import JOB_CANCELLED, TrialResult, infra_failure
from orchestrator.paths import JobDir, TaskPaths
from orchestrator.tasks import Task
from orchestrator.util import write_json_atomic

if TYPE_CHECKING:
    from ray import ObjectRef

    from orchestrator.executors.spec import Item, TrialSpec
    from orchestrator.runtime import Runtime
    from orchestrator.trial import ImageCache, Published, TrialContext

log = get_logger()
NODE_CACHE = Path(os.environ.get("ORCHESTRA_RAY_CACHE", "/var/tmp/orchestra-ray"))


# ---- on the node ---------------------------------------------------------------------------
@dataclass
class _NodeState:
    """What a Ray worker process keeps between the trials it runs: one runtime, and one
    image cache per job (a job's images are built once per node)."""

    runtime: Runtime | None = None
    images: dict[str, ImageCache] = field(default_factory=dict)  # by job name


_node = _NodeState()
_node_lock = threading.Lock()


def _node_runtime() -> Runtime:
    from orchestrator.runtime import open_runtime

    with _node_lock:
        if _node.runtime is None:
            _node.runtime = open_runtime(max_pool_size=32)
        return _node.runtime


def _unpack_task(request: NodeRequest, task_tar: bytes) -> Path:
    """The task folder on this node, keyed by content hash (unpacked once per node)."""
    dataset, _, name = request.task_name.rpartition("/")
    root = NODE_CACHE / "tasks" / request.content_hash
    target = root / (dataset or "tasks") / name
    if not TaskPaths(target).config.is_file():
        tmp = Path(tempfile.mkdtemp(dir=NODE_CACHE, prefix="unpack-"))
        with tarfile.open(fileobj=io.BytesIO(task_tar)) as archive:
            archive.extractall(tmp / "t", filter="data")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp / "t", target)
        except OSError:
            pass  # another worker of this node unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def run_on_node(wire: NodeRequest, task_tar: bytes) -> NodeReply:
    """One whole trial on this node; returns its result and its folder as a tar. The task
    folder arrives as a top-level argument, so Ray resolves it from the object store."""
    import ray

    from orchestrator.host import DiskWatchdog, NetworkPool
    from orchestrator.services import Upstreams
    from orchestrator.tasks import load_task
    from orchestrator.trial import ImageCache, run_trial, trial_dir

    request = NodeRequest.received(wire)
    NODE_CACHE.mkdir(parents=True, exist_ok=True)
    task = load_task(_unpack_task(request, task_tar))
    runtime = _node_runtime()
    spec = request.spec
    lead = spec.manifest.orchestrator
    job = spec.job
    with _node_lock:
        if job not in _node.images:
            _node.images[job] = ImageCache(runtime, job, lead.install if lead.agent == "command" else None,
                                           spec.ca_bundle, spec.build_policy)
        images = _node.images[job]
    if request.images is not None:  # --registry: the driver built and pushed them; pulled here
        if spec.registry:
            from orchestrator.runtime import trust_registry
            trust_registry(spec.registry)
        images.offer(task.name, request.images)
    upstreams = Upstreams.resolved(spec.upstreams) if spec.upstreams else None
    ca_file = None
    if spec.ca_bundle:  # this node's containers and installed agents trust it too
        ca_file = NODE_CACHE / f"ca-{hashlib.sha256(spec.ca_bundle).hexdigest()[:16]}.pem"
        if not ca_file.is_file():
            ca_file.write_bytes(spec.ca_bundle)
    work = Path(tempfile.mkdtemp(dir=NODE_CACHE, prefix="job-"))
    watchdog = DiskWatchdog(runtime, job)
    networks = NetworkPool(runtime, job)
    watchdog.start()
    try:
        ctx = spec.context(runtime=runtime, job_dir=work, images_for=images, watchdog=watchdog,
                           networks=networks, cancel=threading.Event(), upstreams=upstreams,
                           ca_file=ca_file)
        result = run_trial(ctx, task, request.attempt, list(request.retries))
        result.node = ray.get_runtime_context().get_node_id()
        folder = trial_dir(ctx, task, result.trial_id).root
        return NodeReply(result=result, folder=folder.name, tar=tar_directory(folder, "."))
    finally:
        watchdog.stop()
        networks.close()
        shutil.rmtree(work, ignore_errors=True)


def _reap_on_node(label: str) -> dict[str, int]:
    """Remove a job's leftovers on this node's engine; what was removed, by kind."""
    from orchestrator.host import reap

    return reap(_node_runtime(), label)


# ---- on the driver -----------------------------------------------------------------------
class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None):
        import ray

        self.ray = ray
        host = (address or "").rpartition(":")[0]
        loopback = host in ("127.0.0.1", "localhost")
        ray.init(address=address or "auto", ignore_reinit_error=True, log_to_driver=False,
                 logging_level=logging.ERROR,
                 _node_ip_address="127.0.0.1" if loopback else None)  # None: Ray's own choice
        self._task_refs: dict[str, ObjectRef[bytes]] = {}
        self._remote = ray.remote(max_retries=0)(run_on_node)
        self._reaper = ray.remote(num_cpus=0, max_retries=0)(_reap_on_node)
        self._lock = threading.Lock()

    def capacity(self) -> tuple[float, int]:
        resources = self.ray.cluster_resources()
        return float(resources.get("CPU", 1)), int(resources.get("memory", 2**31) // 2**20)

    def _task_ref(self, task: Task) -> ObjectRef[bytes]:
        with self._lock:
            if task.content_hash not in self._task_refs:
                self._task_refs[task.content_hash] = self.ray.put(tar_directory(task.path, "."))
            return self._task_refs[task.content_hash]

    def runner(self, ctx: TrialContext, spec: TrialSpec) -> Callable[[Item], TrialResult]:
        """Each item becomes a Ray task; a trial lost on its node gets the result the
        driver can write (infrastructure, retried by the scheduler)."""
        from orchestrator.trial import new_result, trial_dir, trial_id

        def run_remote(item: Item) -> TrialResult:
            tid = trial_id(ctx.job, item.task, ctx.agent_id, item.attempt)
            fallback = new_result(ctx, item.task, item.attempt, tid)
            fallback.retries = list(item.retries)
            published = self._publish(ctx, item.task, spec.registry, fallback)
            if published is False:  # the push failed: infrastructure, retried
                result = fallback
            else:
                request = NodeRequest(spec=spec, task_name=item.task.name, content_hash=item.task.content_hash,
                                      attempt=item.attempt, retries=list(item.retries), images=published)
                result = self.run(item.task, request, ctx.job_dir, ctx.cancel, fallback)
            if result is fallback:  # lost on its node: the driver writes what it knows
                fallback.finished_at = time.time()
                write_json_atomic(trial_dir(ctx, item.task, tid).result, fallback)
            return result

        return run_remote

    @staticmethod
    def _publish(ctx: TrialContext, task: Task, registry: str | None,
                 fallback: TrialResult) -> Published | None | Literal[False]:
        """With --registry, the driver builds the task's images once and pushes them; the
        node is told where they are (and pulls them instead of building). A task that does
        not build here is left to the node, which reports the build error as its result.
        False: the push failed (the trial is an infrastructure error, retried)."""
        if not registry:
            return None
        from orchestrator.runtime import BuildFailed, RuntimeFault
        from orchestrator.trial import ImageCache

        images = ctx.images_for
        assert isinstance(images, ImageCache)  # the driver's context has one (run_job)
        try:
            return images.publish(task)
        except BuildFailed:
            return None
        except RuntimeFault as exc:
            infra_failure(f"--registry: {exc}"[:1000]).onto(fallback)
            log.warning("ray.publish_failed", task=task.name, error=fallback.error)
            return False

    def run(self, task: Task, request: NodeRequest, job_dir: Path, cancel: threading.Event,
            fallback: TrialResult) -> TrialResult:
        env = task.config.environment
        attempt = request.attempt
        ref = self._remote.options(num_cpus=env.cpus, memory=env.memory_mb * 2**20).remote(
            request, self._task_ref(task))
        while True:
            ready, _ = self.ray.wait([ref], timeout=0.5)
            if ready:
                break
            if cancel.is_set():
                self.ray.cancel(ref, force=True)
                JOB_CANCELLED.onto(fallback)
                return fallback
        try:
            out = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if cause is not None and not isinstance(cause, self.ray.exceptions.RayError):
                # orchestra's own code raised on the node: surface it, never retry it silently
                log.error("ray.trial_crashed", task=task.name, error=repr(cause)[:500])
                raise cause from None
            return self._lost(task, attempt, exc, fallback)
        except Exception as exc:  # node died, worker crashed, object lost: infrastructure
            return self._lost(task, attempt, exc, fallback)
        reply = NodeReply.received(out)
        result = reply.result
        result.task_path = str(task.path)
        trial = JobDir(job_dir).trial(reply.folder)
        trial.set_aside_earlier_try()  # an earlier try is kept, never mixed in
        safe_extract([reply.tar], trial.root)
        write_json_atomic(trial.result, result)
        return result

    @staticmethod
    def _lost(task: Task, attempt: int, exc: Exception, fallback: TrialResult) -> TrialResult:
        """A node died, a worker crashed, an object was lost: infrastructure, retried."""
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
        infra_failure(f"ray: {exc.__class__.__name__}: {(text[-1] if text else '')[:500]}").onto(fallback)
        log.warning("ray.trial_lost", task=task.name, attempt=attempt, error=fallback.error)
        return fallback

    def reap(self, label: str) -> None:
        """Remove a job's leftovers on every alive node (e.g. after a cancel)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        refs = [self._reaper.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                    node_id=node["NodeID"], soft=False)).remote(label)
                for node in self.ray.nodes() if node.get("Alive")]
        try:
            self.ray.get(refs, timeout=60)
        except Exception as exc:
            log.warning("ray.reap_failed", error=str(exc))

    def close(self) -> None:
        self.ray.shutdown()
