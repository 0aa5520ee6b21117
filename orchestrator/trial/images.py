"""Task images and the agent-stack layer (DESIGN 2.2, 5).

- Task image `orchestra/task/<name>:<environment-hash>` (plus a bases and CA suffix), built
  once (a lock per image, across threads and processes); a second run finds it and builds
  nothing. What each FROM starts from (the engine's image, pulled, or a stand-in) is
  bases.py's; orchestra's own Debian bases are built by baseimage.py.
- Agent image `...:<environment-hash>-<stack-hash>` adds images/agent-stack at /opt/orchestra.
- A task's prebuilt `docker_image` (Harbor's) is used as it is, under --build-policy.
- The verifier's image, when the task has tests/Dockerfile, is built the same way.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.archive import tar_directory, tar_files
from orchestrator.log import get_logger
from orchestrator.models import BaseImage
from orchestrator.paths import AGENT_STACK_SOURCE, LOCK_DIR, TaskPaths, verifier_dockerfile
from orchestrator.runtime import (
    LABEL_IMAGE_KIND,
    BuildFailed,
    Runtime,
)
from orchestrator.tasks import (
    StandIn,
    Task,
    base_image,
    hash_tree,
    image_repository,
    read_dockerfile,
)
from orchestrator.trial.bases import (
    _job_bases,
    bases_suffix,
    build_on_bases,
    resolve_bases,
)
from orchestrator.trial.trust import Trust

log = get_logger()

BASE_IMAGE = base_image("bookworm")  # the default stand-in


@dataclass
class TaskImages:
    task_image: str  # the clean image (separate verifier)
    agent_image: str  # task image + agent stack
    built: int = 0
    base_alias: dict[str, str] = field(default_factory=dict)  # reference -> stand-in
    stand_ins: list[StandIn] = field(default_factory=list)  # and why
    source: str = "built"  # prebuilt | pulled | built (Harbor's docker_image, or the Dockerfile)
    pulled: list[str] = field(default_factory=list)  # on a Ray node: what came from --registry
    bases: list[BaseImage] = field(default_factory=list)  # each FROM: local, pulled (digest), stood in


@contextmanager
def image_lock(tag: str) -> Iterator[None]:
    """One builder per image, across threads and processes: a file lock (filelock; each
    holder opens the file itself, so threads of one process exclude each other too)."""
    from filelock import FileLock  # on the first build only: start-up does not pay for it

    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with FileLock(LOCK_DIR / (hashlib.sha256(tag.encode()).hexdigest()[:24] + ".lock")):
        yield


def build_once(runtime: Runtime, tag: str, build: Callable[[], None]) -> int:
    """Build `tag` unless the engine has it, under image_lock (taken only when the image is
    missing, so a warm trial takes no lock). 1 when this call built it, else 0."""
    if runtime.image_exists(tag):
        return 0
    with image_lock(tag):
        if runtime.image_exists(tag):  # another builder finished while this one waited
            return 0
        build()
        return 1


def _stack_hash() -> str:
    return hash_tree(AGENT_STACK_SOURCE)


BUILD_POLICIES = ("prefer-prebuilt", "build", "pull")


def ensure_task_images(runtime: Runtime, task: Task, job: str,
                       install: str | None = None, ca_bundle: bytes | None = None,
                       build_policy: str = "prefer-prebuilt", bases: str | None = None) -> TaskImages:
    """The task image and its agent layer. A `docker_image` under `build_policy`:
    prefer-prebuilt (use it, else pull it, else build environment/Dockerfile), build (always
    the Dockerfile when there is one), pull (pull it fresh; no fallback). The Dockerfile's
    bases under `bases` (the job's --bases: auto | pull | offline; resolve_bases)."""
    env = task.config.environment
    labels = {LABEL_IMAGE_KIND: "task-image", "orchestra.image.task": task.name,
              "orchestra.image.job": job}
    built, resolved = 0, []
    source = "built"
    variant = task.environment_hash + (
        f"-ca{hashlib.sha256(ca_bundle).hexdigest()[:8]}" if ca_bundle is not None else "")
    has_dockerfile = TaskPaths(task.path).dockerfile.is_file()
    _job_bases(job, bases)  # the job's mode, for its verifier and sidecar builds too
    if env.docker_image and build_policy == "pull":
        runtime.pull(env.docker_image, timeout_sec=600)  # BuildFailed: said, no fallback
        prebuilt = "pulled"
    elif env.docker_image and build_policy == "build" and has_dockerfile:
        prebuilt = None
    else:
        prebuilt = env.docker_image and _prebuilt(runtime, env.docker_image, task)
    if prebuilt:
        assert env.docker_image is not None  # a prebuilt image is always the task's docker_image
        task_image, source = env.docker_image, prebuilt
    else:
        folder = TaskPaths(task.path).environment
        dockerfile = read_dockerfile(TaskPaths(task.path).dockerfile)
        resolved = resolve_bases(runtime, dockerfile, job, "task")
        variant = task.environment_hash + bases_suffix(resolved, ca_bundle)
        task_image = f"{image_repository(task)}:{variant}"

        def build_task_image() -> None:
            started = time.monotonic()
            build_on_bases(runtime, folder, dockerfile, resolved, task_image, labels,
                           env.build_timeout_sec, ca_bundle)
            log.info("image.built", image=task_image, seconds=round(time.monotonic() - started, 2))

        built += build_once(runtime, task_image, build_task_image)
    agent_image = f"{task_image.rsplit(':', 1)[0]}:{variant}-{_stack_hash()}"
    if prebuilt:  # keyed by the image *id*: a re-pulled or rebuilt tag gets a new layer
        image_id = runtime.image_facts(task_image).id.split(":")[-1]
        agent_image = f"orchestra/agent/{image_id[:16]}:{_stack_hash()}"

    def build_agent_image() -> None:
        context = tar_files({"Dockerfile": (
            f"FROM {task_image}\nCOPY agent-stack /opt/orchestra\n"
            "COPY bin-links/ /usr/local/bin/\n").encode()})
        context = _append_tree(context, AGENT_STACK_SOURCE, "agent-stack")
        runtime.build_image(context, agent_image, {**labels, LABEL_IMAGE_KIND: "agent-image"}, 300)

    built += build_once(runtime, agent_image, build_agent_image)
    if install:
        agent_image, extra = _install_layer(runtime, agent_image, install, labels)
        built += extra
    stand_ins = [r.stand_in for r in resolved if r.stand_in is not None]
    return TaskImages(task_image=task_image, agent_image=agent_image, built=built,
                      base_alias={s.reference: s.stand_in for s in stand_ins},
                      stand_ins=stand_ins, source=source, bases=[r.record for r in resolved])


def verifier_image(runtime: Runtime, task: Task, fallback: str, job: str = "",
                   trust: Trust | None = None) -> tuple[str, str, list[BaseImage]]:
    """Harbor's separate verifier: an image built from tests/ when tests/Dockerfile exists
    (cached by the folder's content, its bases and the CA), else the clean task image. Its
    FROM is resolved as the task's is (pulled, else stood in) and it trusts the trial's CA
    bundle, through the same build path. Returns (image, source, its bases)."""
    tests = task.tests_dirs[-1] if task.tests_dirs else TaskPaths(task.path).tests
    dockerfile = verifier_dockerfile(tests)
    if not dockerfile.is_file():
        return fallback, "task image", []
    text = read_dockerfile(dockerfile)
    ca = trust.pem if trust is not None else None
    resolved = resolve_bases(runtime, text, job, "verifier")
    tag = (f"{image_repository(task).replace('orchestra/task/', 'orchestra/verifier/')}:"
           f"{hash_tree(tests)[:32]}{bases_suffix(resolved, ca)}")

    def build() -> None:
        build_on_bases(runtime, tests, text, resolved, tag,
                       {LABEL_IMAGE_KIND: "verifier-image", "orchestra.image.task": task.name},
                       task.config.verifier_environment().build_timeout_sec, ca)

    build_once(runtime, tag, build)
    return tag, "tests/Dockerfile", [r.record for r in resolved]


def _prebuilt(runtime: Runtime, ref: str, task: Task) -> str | None:
    """Harbor's `docker_image`: used when present, pulled when possible ("prebuilt" or
    "pulled"); otherwise None, and the task is built from environment/Dockerfile when it
    has one (said in the result as image_source "built"). Neither: a build error."""
    if runtime.image_exists(ref):
        return "prebuilt"
    try:
        runtime.pull(ref, timeout_sec=600)
        log.info("image.pulled", image=ref)
        return "pulled"
    except BuildFailed as exc:
        if TaskPaths(task.path).dockerfile.is_file():
            log.warning("image.pull_failed_building", image=ref, error=str(exc)[:300])
            return None
        raise BuildFailed(f"docker_image {ref}: not present locally and the pull failed "
                          f"({exc}); add environment/Dockerfile or load the image "
                          "(`docker load`)") from exc


def _install_layer(runtime: Runtime, base: str, script: str,
                   labels: dict[str, str]) -> tuple[str, int]:
    """A command agent's `install` script, baked once into a layer tagged by its hash."""
    digest = hashlib.sha256(script.encode()).hexdigest()[:12]
    image = f"{base}-install-{digest}"

    def build() -> None:
        context = tar_files({
            "Dockerfile": (f"FROM {base}\nCOPY install.sh /tmp/orchestra-install.sh\n"
                           "RUN sh /tmp/orchestra-install.sh && rm -f /tmp/orchestra-install.sh\n").encode(),
            "install.sh": script.encode()})
        runtime.build_image(context, image, {**labels, LABEL_IMAGE_KIND: "agent-image"}, 900)
        log.info("image.install_layer", image=image)

    return image, build_once(runtime, image, build)


def _append_tree(context: bytes, folder: Path, arcname: str) -> bytes:
    """A build context: the given tar plus `folder` as read-only files under arcname."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as merged:
        with tarfile.open(fileobj=io.BytesIO(context)) as first:
            for member in first:
                merged.addfile(member, first.extractfile(member) if member.isfile() else None)
        for tool in sorted(p.name for p in (folder / "bin").iterdir()):
            link = tarfile.TarInfo(f"bin-links/{tool}")
            link.type, link.linkname = tarfile.SYMTYPE, f"/opt/orchestra/bin/{tool}"
            merged.addfile(link)
        with tarfile.open(fileobj=io.BytesIO(tar_directory(folder, arcname, mode=0o444))) as second:
            for member in second:
                if member.isfile():
                    member.mode = 0o555 if member.mode & 0o111 else 0o444
                else:
                    member.mode = 0o555
                merged.addfile(member, second.extractfile(member) if member.isfile() else None)
    return out.getvalue()
