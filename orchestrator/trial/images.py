"""Task images, the agent-stack layer, and the air-gapped bases that stand in (DESIGN 2.2, 5).

- Task image `orchestra/task/<name>:<environment-hash>`, built once (a lock per image,
  across threads and processes); a second run finds it and builds nothing.
- Agent image `...:<environment-hash>-<stack-hash>` adds images/agent-stack at /opt/orchestra.
- No registry: `bootstrap_base()` builds Debian bases (bookworm, trixie; bullseye when a
  task asks) from Debian packages, made to behave like the official python images (pip,
  venv, no EXTERNALLY-MANAGED marker, /usr/local/bin/python3, UTF-8). A FROM the engine
  lacks is built on the nearest base by rule (standins.py): the Dockerfile in the build
  context names the stand-in; no tag is ever made or moved for the reference. What stood
  in, why, and any warning go to the log and each trial's result.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.archive import tar_directory, tar_files
from orchestrator.log import get_logger
from orchestrator.paths import AGENT_STACK_SOURCE, LOCK_DIR
from orchestrator.runtime.base import LABEL_IMAGE_KIND, BuildFailed, Runtime
from orchestrator.tasks.load import Task, hash_tree, image_repository
from orchestrator.tasks.standins import RELEASES, StandIn, base_image, choose
from orchestrator.trial.trust import CA_PATH, CA_VARIABLES

log = get_logger()

BASE_IMAGE = base_image("bookworm")  # the default stand-in
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass
class TaskImages:
    task_image: str  # the clean image (separate verifier)
    agent_image: str  # task image + agent stack
    built: int = 0
    base_alias: dict[str, str] = field(default_factory=dict)  # reference -> stand-in
    stand_ins: list[StandIn] = field(default_factory=list)  # and why
    source: str = "built"  # prebuilt | pulled | built (Harbor's docker_image, or the Dockerfile)
    pulled: list[str] = field(default_factory=list)  # on a Ray node: what came from --registry


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


def stack_hash() -> str:
    return hash_tree(AGENT_STACK_SOURCE)


def base_references(dockerfile: str) -> list[str]:
    """The external images a Dockerfile starts FROM (stage names excluded)."""
    stages: set[str] = set()
    refs = []
    for line in dockerfile.splitlines():
        match = _FROM.match(line)
        if not match:
            continue
        ref = match.group(1)
        if ref.lower() not in stages and ref.lower() != "scratch":
            refs.append(ref)
        parts = line.split()
        if len(parts) >= 4 and parts[-2].lower() == "as":
            stages.add(parts[-1].lower())
    return refs


def _orchestra_base(runtime: Runtime, ref: str) -> bool:
    """Whether `ref` is one of orchestra's own bases (or an alias tag an older orchestra
    made for one): such a tag is never taken for the real image it is named after."""
    try:
        labels = runtime.image_facts(ref).labels
    except Exception:
        return False
    return labels.get(LABEL_IMAGE_KIND) == "base"


def stand_in_for(runtime: Runtime, ref: str) -> StandIn | None:
    """None when the engine has the real `ref`; else what stands in (or BuildFailed)."""
    if runtime.image_exists(ref) and not _orchestra_base(runtime, ref):
        return None
    if ref.startswith("orchestra/base:") and ref.split(":", 1)[1] in RELEASES:
        return None  # a task that names a base itself (bootstrapped on demand below)
    chosen = choose(ref)
    if chosen is None:
        raise BuildFailed(
            f"FROM {ref}: not present locally, orchestra never pulls, and no offline base is "
            "near enough to stand in (the Debian bases `orchestra images bootstrap` builds stand "
            "in for python, debian and ubuntu images). Load the image (`docker load`) or use one "
            "of those.")
    return chosen


def resolve_bases(runtime: Runtime, dockerfile: str) -> list[StandIn]:
    """What stands in for each FROM reference the engine lacks; the bases they need are
    built now when absent (bullseye, or any after `docker rmi`)."""
    from orchestrator.trial.baseimage import bootstrap_base  # it builds under image_lock, from here

    chosen = []
    for ref in base_references(dockerfile):
        release = ref.split(":", 1)[1] if ref.startswith("orchestra/base:") else None
        stand_in = stand_in_for(runtime, ref)
        if stand_in is not None:
            release = stand_in.release
            log.info("image.stand_in", reference=ref, stand_in=stand_in.stand_in,
                     python=stand_in.python, reason=stand_in.reason)
            if stand_in.warning:
                log.warning("image.stand_in_for_digest", reference=ref, warning=stand_in.warning)
            chosen.append(stand_in)
        if release in RELEASES:
            bootstrap_base(runtime, release)
    return chosen


def with_stand_ins(dockerfile: str, stand_ins: list[StandIn]) -> str:
    """The Dockerfile with each stood-in FROM reference replaced by its stand-in."""
    swap = {s.reference: s.stand_in for s in stand_ins}
    if not swap:
        return dockerfile

    def replace(match: re.Match) -> str:
        ref = match.group(1)
        return match.group(0).replace(ref, swap[ref], 1) if ref in swap else match.group(0)

    return _FROM.sub(replace, dockerfile)




def build_context(folder: Path, dockerfile: str, stand_ins: list[StandIn],
                  ca: bytes | None) -> bytes:
    """The folder as a build context, its Dockerfile naming the stand-ins; with a CA
    bundle, trusted in every stage (after each FROM: the file, and the variables pip,
    requests, curl, node and git read), so `pip install` works behind a TLS-intercepting
    proxy. The task's own files are unchanged."""
    context = tar_directory(folder)
    if not stand_ins and ca is None:
        return context
    lines = []
    for line in with_stand_ins(dockerfile, stand_ins).splitlines():
        lines.append(line)
        if ca is not None and _FROM.match(line):
            lines.append(f"COPY orchestra-ca-bundle.pem {CA_PATH}")
            lines.append("ENV " + " ".join(f"{v}={CA_PATH}" for v in CA_VARIABLES))
    extra = {"Dockerfile": ("\n".join(lines) + "\n").encode()}
    if ca is not None:
        extra["orchestra-ca-bundle.pem"] = ca
    return _replace_members(context, extra)


def _replace_members(context: bytes, files: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as merged:
        with tarfile.open(fileobj=io.BytesIO(context)) as first:
            for member in first:
                if member.name.lstrip("./") in files:
                    continue
                merged.addfile(member, first.extractfile(member) if member.isfile() else None)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            merged.addfile(info, io.BytesIO(data))
    return out.getvalue()


BUILD_POLICIES = ("prefer-prebuilt", "build", "pull")


def ensure_task_images(runtime: Runtime, task: Task, job: str,
                       install: str | None = None, ca_bundle: bytes | None = None,
                       build_policy: str = "prefer-prebuilt") -> TaskImages:
    """The task image and its agent layer. A `docker_image` under `build_policy`:
    prefer-prebuilt (use it, else pull it, else build environment/Dockerfile), build (always
    the Dockerfile when there is one), pull (pull it fresh; no fallback)."""
    env = task.config.environment
    labels = {LABEL_IMAGE_KIND: "task-image", "orchestra.image.task": task.name,
              "orchestra.image.job": job}
    built, stand_ins = 0, []
    source = "built"
    variant = task.environment_hash + (
        f"-ca{hashlib.sha256(ca_bundle).hexdigest()[:8]}" if ca_bundle is not None else "")
    has_dockerfile = (task.path / "environment" / "Dockerfile").is_file()
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
        dockerfile = (task.path / "environment" / "Dockerfile").read_text()
        stand_ins = resolve_bases(runtime, dockerfile)
        if stand_ins:  # built on a stand-in: a rebuilt base (or a real image) is a new tag
            ids = "".join(runtime.image_facts(s.stand_in).id for s in stand_ins)
            variant += f"-b{hashlib.sha256(ids.encode()).hexdigest()[:8]}"
        task_image = f"{image_repository(task)}:{variant}"

        def build_task_image() -> None:
            started = time.monotonic()
            context = build_context(task.path / "environment", dockerfile, stand_ins, ca_bundle)
            labels[LABEL_STAND_INS] = json.dumps([s.as_dict() for s in stand_ins])
            runtime.build_image(context, task_image, labels, env.build_timeout_sec)
            log.info("image.built", image=task_image, seconds=round(time.monotonic() - started, 2))

        built += build_once(runtime, task_image, build_task_image)
    agent_image = f"{task_image.rsplit(':', 1)[0]}:{variant}-{stack_hash()}"
    if prebuilt:  # keyed by the image *id*: a re-pulled or rebuilt tag gets a new layer
        image_id = runtime.image_facts(task_image).id.split(":")[-1]
        agent_image = f"orchestra/agent/{image_id[:16]}:{stack_hash()}"

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
    return TaskImages(task_image=task_image, agent_image=agent_image, built=built,
                      base_alias={s.reference: s.stand_in for s in stand_ins},
                      stand_ins=stand_ins, source=source)


LABEL_STAND_INS = "orchestra.image.stand_ins"  # what stood in, on the task image


def verifier_image(runtime: Runtime, task: Task, fallback: str) -> tuple[str, str]:
    """Harbor's separate verifier: an image built from tests/ when tests/Dockerfile exists
    (cached by the folder's content), else the clean task image. Returns (image, source)."""
    tests = task.tests_dirs[-1] if task.tests_dirs else task.path / "tests"
    dockerfile = tests / "Dockerfile"
    if not dockerfile.is_file():
        return fallback, "task image"
    tag = f"{image_repository(task).replace('orchestra/task/', 'orchestra/verifier/')}:{hash_tree(tests)}"

    def build() -> None:
        text = dockerfile.read_text()
        runtime.build_image(build_context(tests, text, resolve_bases(runtime, text), None), tag,
                            {LABEL_IMAGE_KIND: "verifier-image", "orchestra.image.task": task.name},
                            task.config.verifier_environment().build_timeout_sec)

    build_once(runtime, tag, build)
    return tag, "tests/Dockerfile"


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
        if (task.path / "environment" / "Dockerfile").is_file():
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
