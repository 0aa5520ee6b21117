"""Removing what orchestra made: a job's objects, orphans of hard-killed jobs, old images.

Every container, network and volume carries orchestra.job, orchestra.pid and
orchestra.host labels. At start a job reaps objects whose owning process on this host is
gone (a SIGKILLed orchestrator), and says what it removed; live jobs are left alone.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

from orchestrator.log import get_logger
from orchestrator.paths import LOCK_DIR
from orchestrator.runtime import (
    LABEL_IMAGE_KIND,
    LABEL_JOB,
    LABEL_KIND,
    LABEL_PID,
    ImageFacts,
    OwnedObject,
    Runtime,
)
from orchestrator.util import write_atomic

log = get_logger()
LABEL_HOST = "orchestra.host"
USAGE_FILE = LOCK_DIR / "image-usage.json"


def owner_labels() -> dict[str, str]:
    return {LABEL_PID: str(os.getpid()), LABEL_HOST: socket.gethostname()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def own(label: str) -> list[str]:
    """`label` narrowed to what this process made (a job's own end of job clean-up)."""
    return [label, f"{LABEL_PID}={os.getpid()}"]


def _scope(label: str | list[str]) -> tuple[list[str], str | None, bool]:
    """The labels to match, the job they name (if the first is a job label), and whether
    they are narrowed to this process (own())."""
    labels = [label] if isinstance(label, str) else label
    job = labels[0].partition("=")[2] if labels[0].startswith(LABEL_JOB + "=") else None
    return labels, job, any(lab.startswith(LABEL_PID + "=") for lab in labels)


def reap(runtime: Runtime, label: str | list[str], disks: bool = True) -> dict[str, int]:
    """Remove containers, volumes, networks (and, unless `disks` is False, their loop disks)
    carrying a label (or every label of a list: `own(label)` for this process's only).

    Never raises for one object: removal is idempotent (another remover may be at the same
    object, e.g. a trial's own clean-up or a Ray node's reaper on a shared engine), and an
    object that cannot be removed is logged by name and left for `remaining()` to report.
    """
    labels, job, mine = _scope(label)
    containers, networks, volumes = runtime.labelled(*labels)
    failed = 0
    for kind, remove, names in (("container", runtime.remove, containers),
                                ("volume", runtime.remove_volume, volumes)):
        failed += sum(not try_remove(kind, remove, name) for name in names)
    quotas = runtime.loop_disks()
    gone = quotas.reap(job, own=mine) if disks and quotas and (job or labels[0] == LABEL_KIND) else 0
    failed += sum(not try_remove("network", runtime.remove_network, n) for n in networks)
    return {"containers": len(containers), "networks": len(networks), "volumes": len(volumes),
            "disks": gone, "failed": failed}


def try_remove(kind: str, remove: Callable[[str], object], name: str) -> bool:
    try:
        remove(name)
        return True
    except Exception as exc:  # logged with the object; remaining() says what is left
        log.warning("cleanup.remove_failed", kind=kind, name=name[:64], error=str(exc)[:300])
        return False


def remaining(runtime: Runtime, label: str | list[str], engine_objects: bool = True) -> list[str]:
    """What still carries `label` (and loop disks of that job): "kind name" lines. Without
    `engine_objects`, the loop disks alone (the caller's own listing just found none)."""
    labels, job, mine = _scope(label)
    containers, networks, volumes = runtime.labelled(*labels) if engine_objects else ([], [], [])
    left = ([f"container {c[:12]}" for c in containers] + [f"network {n}" for n in networks]
            + [f"volume {v}" for v in volumes])
    if job is not None and (quotas := runtime.loop_disks()) is not None:
        left += [f"loop disk {d}" for d in quotas.mounted(job, own=mine)]
    return left


def _dead_owner(labels: dict[str, str], host: str) -> bool:
    pid = labels.get(LABEL_PID, "")
    return labels.get(LABEL_HOST) == host and pid.isdigit() and not _alive(int(pid))


def _dead_owners(runtime: Runtime, rows: list[OwnedObject] | None = None) -> set[tuple[str, str]]:
    """(job, pid) of objects on this host whose orchestrator process no longer exists (from
    `rows` of runtime.owned_objects() when the caller already has them). By owner, not by job
    name alone: a live job may carry the name of a killed one (a resume, or the same
    --job-name in another --jobs-dir), and its objects are not orphans."""
    host = socket.gethostname()
    rows = runtime.owned_objects() if rows is None else rows
    return {(row.labels.get(LABEL_JOB, ""), row.labels[LABEL_PID]) for row in rows
            if _dead_owner(row.labels, host) and row.labels.get(LABEL_JOB)}


def plan(runtime: Runtime, job: str | None = None, everything: bool = False) -> list[OwnedObject]:
    """What a clean-up would remove: every orchestra-created object (everything), one job's,
    or (default) those of dead owners on this host. Never anything orchestra did not create."""
    rows = runtime.owned_objects()
    if everything:
        return rows
    if job is not None:
        return [r for r in rows if r.labels.get(LABEL_JOB) == job]
    host = socket.gethostname()
    return [r for r in rows if r.labels.get(LABEL_JOB) and _dead_owner(r.labels, host)]


def reap_orphans(runtime: Runtime) -> dict[str, int]:
    """Objects whose orchestrator process on this host no longer exists (live jobs of the
    same name untouched); their loop disks by the owner's pid in the folder's name."""
    owners = _dead_owners(runtime)
    totals = {"containers": 0, "networks": 0, "volumes": 0, "disks": 0, "failed": 0}
    for job, pid in sorted(owners):
        for key, value in reap(runtime, [f"{LABEL_JOB}={job}", f"{LABEL_PID}={pid}"], disks=False).items():
            totals[key] += value
    if (quotas := runtime.loop_disks()) is not None:
        totals["disks"] += quotas.reap_dead_owners(_alive)
    if any(totals.values()):
        log.warning("reaper.removed_orphans", jobs=sorted({job for job, _ in owners}), **totals)
    return totals


_usage_lock = threading.Lock()


def touch_images(refs: list[str]) -> None:
    """Record when images were last used, for `cleanup --images --keep-gb` (best effort)."""
    from filelock import FileLock

    with _usage_lock:  # threads queue here; the file lock is for other processes
        try:
            USAGE_FILE.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(USAGE_FILE.with_suffix(".lock")):
                try:
                    usage = json.loads(USAGE_FILE.read_text())
                except (OSError, json.JSONDecodeError):
                    usage = {}
                usage.update(dict.fromkeys(refs, time.time()))
                write_atomic(USAGE_FILE, json.dumps(usage))
        except OSError as exc:
            log.warning("images.usage_not_recorded", error=str(exc))


PRUNABLE = ("task-image", "agent-image", "snapshot")  # kinds of image a prune may remove


def prunable(runtime: Runtime) -> list[ImageFacts]:
    """The images a prune may remove: orchestra's task, agent and snapshot images (never
    a base, a verifier's or a sidecar's)."""
    return [i for i in runtime.images_labelled(LABEL_IMAGE_KIND) if i.labels.get(LABEL_IMAGE_KIND) in PRUNABLE]


def prune_images(runtime: Runtime, keep_gb: float | None, keep: frozenset[str] = frozenset(),
                 spare_used_within_sec: float | None = None,
                 mine: frozenset[str] = frozenset(), dry_run: bool = False) -> list[ImageFacts]:
    """Remove orchestra's task and agent images, least recently used first, until what is
    left fits keep_gb (all of them when keep_gb is None). The offline base is kept, and so
    is every image tagged with a reference in `keep`; with `spare_used_within_sec`, so is
    every image used that recently unless one of its tags is in `mine` (a running job's
    budget: another job on this host may be using it). What the images take is their
    disk (`DiskUse`): a base many of them were built on counts once. Returns the images
    removed (with `dry_run`, those it would remove; none is)."""
    try:
        usage = json.loads(USAGE_FILE.read_text())
    except (OSError, json.JSONDecodeError):
        usage = {}
    images = prunable(runtime)

    def last_used(image: ImageFacts) -> float:
        return max([usage.get(t, 0.0) for t in image.tags] + [image.created])

    images.sort(key=lambda i: (last_used(i), -i.created))  # a child (agent image) before its parent
    disk = DiskUse(runtime.image_tree(), images)
    budget = None if keep_gb is None else keep_gb * 1024 ** 3
    removed = []
    now = time.time()
    for image in images:
        if budget is not None and disk.total <= budget:
            break
        if keep & set(image.tags):
            continue
        if (spare_used_within_sec is not None and not mine & set(image.tags)
                and now - last_used(image) < spare_used_within_sec):
            continue
        if not dry_run and not try_remove("image", runtime.remove_image, image.id):
            continue
        disk.forget(image)
        removed.append(image)
    return removed


class DiskUse:
    """The bytes a set of images takes on disk: each image's own (its size less what it was
    built on, which the engine counts in its size too), counted once however many of the
    set were built on it. Summing the images' sizes instead counts a shared base once per
    image (80 task images on one 226 MB base read as ~20 GB of ~5.5 GB on disk, and a budget
    of 20 GB pruned 25 images). `forget` takes one image out: what only it used is freed."""

    def __init__(self, tree: dict[str, tuple[str, int]], images: list[ImageFacts]):
        # the engine's tree, and any of the images it no longer lists as they were read
        self._tree = {**{i.id: (i.parent, i.size) for i in images}, **tree}
        self._chains = {i.id: self._chain(i.id) for i in images}
        self._users = Counter(node for chain in self._chains.values() for node in chain)
        self.total = sum(self._own(node) for node in self._users)

    def _chain(self, image: str) -> list[str]:
        """The image and what it was built on, down to an image built on nothing (or one the
        engine no longer lists: its bytes are then the last one's own)."""
        chain: list[str] = []
        node = image
        while node and node in self._tree and node not in chain:
            chain.append(node)
            node = self._tree[node][0]
        return chain

    def _own(self, node: str) -> int:
        parent, size = self._tree[node]
        return max(size - (self._tree[parent][1] if parent in self._tree else 0), 0)

    def forget(self, image: ImageFacts) -> None:
        for node in self._chains[image.id]:
            self._users[node] -= 1
            if self._users[node] == 0:
                self.total -= self._own(node)
