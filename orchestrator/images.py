"""Task images, the agent-stack layer, and the air-gapped base with its aliases (DESIGN 2.2, 5).

- Task image `orchestra/task/<name>:<environment-hash>`, built once (a lock per image,
  across threads and processes); a second run finds it and builds nothing.
- Agent image `...:<environment-hash>-<stack-hash>` adds images/agent-stack at /opt/orchestra.
- No registry: `bootstrap_base()` builds a Debian bookworm + python3 base from Debian
  packages and labels it with the references it stands in for. A build whose FROM is
  missing locally uses that alias: explicitly, logged, and recorded in the trial result.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.archive import tar_directory, tar_files
from orchestrator.log import get_logger
from orchestrator.paths import LOCK_DIR
from orchestrator.runtime.base import LABEL_IMAGE_KIND, BuildFailed, Runtime
from orchestrator.tasks import Task, hash_tree, image_repository

log = get_logger()

AGENT_STACK = Path(__file__).resolve().parent.parent / "images" / "agent-stack"
BASE_IMAGE = "orchestra/base:bookworm"
LABEL_ALIASES = "orchestra.aliases"
DEFAULT_ALIASES = (
    "python:3.12-slim-bookworm", "python:3.12-slim", "python:3.11-slim-bookworm",
    "python:3.11-slim", "debian:bookworm-slim", "debian:bookworm",
)
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)
_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


@dataclass
class TaskImages:
    task_image: str  # the clean image (separate verifier)
    agent_image: str  # task image + agent stack
    built: int = 0
    base_alias: dict[str, str] = field(default_factory=dict)
    source: str = "built"  # prebuilt | pulled | built (Harbor's docker_image, or the Dockerfile)


@contextmanager
def image_lock(tag: str):
    """One builder per image: a thread lock inside the process, a file lock across them."""
    with _thread_locks_guard:
        lock = _thread_locks.setdefault(tag, threading.Lock())
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    path = LOCK_DIR / (hashlib.sha256(tag.encode()).hexdigest()[:24] + ".lock")
    with lock, open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stack_hash() -> str:
    return hash_tree(AGENT_STACK)


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


def _alias_source(runtime: Runtime, ref: str) -> str | None:
    """The local base image standing in for `ref`, if one is registered."""
    base = _base_id(runtime)
    if base is None:
        return None
    aliases = (runtime.image_inspect(base)["Config"].get("Labels") or {}).get(LABEL_ALIASES, "")
    return BASE_IMAGE if ref in aliases.split(",") else None


def _base_id(runtime: Runtime) -> str | None:
    """The offline base is the image orchestra's own tag names, identified by its id: an
    image that merely inherited the base's labels (a child built FROM it) is never it."""
    try:
        return runtime.image_inspect(BASE_IMAGE)["Id"]
    except Exception:
        return None


def resolve_bases(runtime: Runtime, dockerfile: str) -> dict[str, str]:
    """Make every FROM reference present locally; return {reference: alias used}."""
    used = {}
    for ref in base_references(dockerfile):
        if runtime.image_exists(ref):
            if _is_base(runtime, ref):
                used[ref] = BASE_IMAGE
            continue
        source = _alias_source(runtime, ref)
        if source is None:
            raise BuildFailed(
                f"FROM {ref}: not present locally, and orchestra never pulls. Run "
                "`orchestra images bootstrap` (or `make base-image`) to build an offline "
                "base registered for it, or load the image with `docker load`."
            )
        log.info("image.alias", reference=ref, alias=source)
        runtime.tag_image(source, ref if ":" in ref else ref + ":latest")
        used[ref] = source
    return used


CA_PATH = "/etc/orchestra/ca-bundle.pem"
CA_VARIABLES = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")


def with_ca(context: bytes, dockerfile: str, ca: bytes) -> bytes:
    """The build context with a CA bundle, and a Dockerfile that trusts it in every stage
    (after each FROM: the file, and the variables pip, requests, curl, node and git read),
    so `pip install` works behind a TLS-intercepting proxy. The task's files are unchanged."""
    import io
    import tarfile

    lines = []
    for line in dockerfile.splitlines():
        lines.append(line)
        if _FROM.match(line):
            lines.append(f"COPY orchestra-ca-bundle.pem {CA_PATH}")
            lines.append("ENV " + " ".join(f"{v}={CA_PATH}" for v in CA_VARIABLES))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as merged:
        with tarfile.open(fileobj=io.BytesIO(context)) as first:
            for member in first:
                if member.name.lstrip("./") in ("Dockerfile", "orchestra-ca-bundle.pem"):
                    continue
                merged.addfile(member, first.extractfile(member) if member.isfile() else None)
        for name, data in (("Dockerfile", ("\n".join(lines) + "\n").encode()),
                           ("orchestra-ca-bundle.pem", ca)):
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
    built, aliases = 0, {}
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
        task_image, source = env.docker_image, prebuilt
    else:
        task_image = f"{image_repository(task)}:{variant}"
        dockerfile = (task.path / "environment" / "Dockerfile").read_text()
        with image_lock(task_image):
            if not runtime.image_exists(task_image):
                aliases = resolve_bases(runtime, dockerfile)
                started = time.monotonic()
                context = tar_directory(task.path / "environment")
                if ca_bundle is not None:
                    context = with_ca(context, dockerfile, ca_bundle)
                runtime.build_image(context, task_image, labels, env.build_timeout_sec)
                built += 1
                log.info("image.built", image=task_image, seconds=round(time.monotonic() - started, 2))
            else:
                aliases = {ref: BASE_IMAGE for ref in base_references(dockerfile)
                           if _is_base(runtime, ref)}
    agent_image = f"{task_image.rsplit(':', 1)[0]}:{variant}-{stack_hash()}"
    if prebuilt:  # keyed by the image *id*: a re-pulled or rebuilt tag gets a new layer
        image_id = runtime.image_inspect(task_image)["Id"].split(":")[-1]
        agent_image = f"orchestra/agent/{image_id[:16]}:{stack_hash()}"
    with image_lock(agent_image):
        if not runtime.image_exists(agent_image):
            context = tar_files({"Dockerfile": (
                f"FROM {task_image}\nCOPY agent-stack /opt/orchestra\n"
                "COPY bin-links/ /usr/local/bin/\n").encode()})
            context = _append_tree(context, AGENT_STACK, "agent-stack")
            runtime.build_image(context, agent_image, {**labels, LABEL_IMAGE_KIND: "agent-image"}, 300)
            built += 1
    if install:
        agent_image, extra = _install_layer(runtime, agent_image, install, labels)
        built += extra
    return TaskImages(task_image=task_image, agent_image=agent_image, built=built,
                      base_alias=aliases, source=source)


def verifier_image(runtime: Runtime, task: Task, fallback: str) -> tuple[str, str]:
    """Harbor's separate verifier: an image built from tests/ when tests/Dockerfile exists
    (cached by the folder's content), else the clean task image. Returns (image, source)."""
    tests = task.tests_dirs[-1] if task.tests_dirs else task.path / "tests"
    dockerfile = tests / "Dockerfile"
    if not dockerfile.is_file():
        return fallback, "task image"
    tag = f"{image_repository(task).replace('orchestra/task/', 'orchestra/verifier/')}:{hash_tree(tests)}"
    with image_lock(tag):
        if not runtime.image_exists(tag):
            resolve_bases(runtime, dockerfile.read_text())
            runtime.build_image(tar_directory(tests), tag,
                                {LABEL_IMAGE_KIND: "verifier-image", "orchestra.image.task": task.name},
                                task.config.verifier_environment().build_timeout_sec)
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
    with image_lock(image):
        if runtime.image_exists(image):
            return image, 0
        context = tar_files({
            "Dockerfile": (f"FROM {base}\nCOPY install.sh /tmp/orchestra-install.sh\n"
                           "RUN sh /tmp/orchestra-install.sh && rm -f /tmp/orchestra-install.sh\n").encode(),
            "install.sh": script.encode()})
        runtime.build_image(context, image, {**labels, LABEL_IMAGE_KIND: "agent-image"}, 900)
        log.info("image.install_layer", image=image)
        return image, 1


def _is_base(runtime: Runtime, ref: str) -> bool:
    if not runtime.image_exists(ref):
        return False
    base = _base_id(runtime)
    return base is not None and runtime.image_inspect(ref)["Id"] == base


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


def bootstrap_base(runtime: Runtime, aliases: tuple[str, ...] = DEFAULT_ALIASES,
                   force: bool = False, suite: str = "bookworm") -> str:
    """debootstrap a minbase Debian + python3 into a folder and `docker import` it."""
    if runtime.image_exists(BASE_IMAGE) and not force:
        log.info("base.present", image=BASE_IMAGE)
        return BASE_IMAGE
    if shutil.which("debootstrap") is None:
        raise BuildFailed("debootstrap is not installed (apt-get install -y debootstrap)")
    workdir = Path(tempfile.mkdtemp(prefix="orchestra-base-", dir="/var/tmp"))
    rootfs, tarball = workdir / "rootfs", workdir / "rootfs.tar"
    try:
        log.info("base.debootstrap", suite=suite, folder=str(rootfs))
        started = time.monotonic()
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3", suite, str(rootfs)],
                       check=True, capture_output=True, timeout=900)
        (rootfs / "usr/local/bin").mkdir(parents=True, exist_ok=True)
        python = rootfs / "usr/local/bin/python"
        if not python.exists():
            python.symlink_to("/usr/bin/python3")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True, timeout=600)
        changes = [
            f"LABEL {LABEL_IMAGE_KIND}=base {LABEL_ALIASES}={','.join(aliases)}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["bash"]',
        ]
        repository, tag = BASE_IMAGE.split(":")
        runtime.import_image(str(tarball), repository, tag, changes)
        log.info("base.imported", image=BASE_IMAGE, aliases=list(aliases),
                 seconds=round(time.monotonic() - started, 1))
    except subprocess.CalledProcessError as exc:
        raise BuildFailed(f"debootstrap failed: {exc.stderr.decode(errors='replace')[-2000:]}") from exc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return BASE_IMAGE
