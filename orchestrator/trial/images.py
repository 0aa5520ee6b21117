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
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from orchestrator.archive import spool_tree, tar_directory, tar_files
from orchestrator.log import get_logger
from orchestrator.models import BaseImage, BuildFailure
from orchestrator.paths import AGENT_STACK_SOURCE, LOCK_DIR, TaskPaths, verifier_dockerfile
from orchestrator.runtime import (
    LABEL_IMAGE_KIND,
    BuildFailed,
    ImageFacts,
    PulledImage,
    PullFailed,
    Runtime,
)
from orchestrator.tasks import (
    RELEASES,
    StandIn,
    Task,
    base_image,
    choose,
    for_classic_builder,
    hash_tree,
    image_repository,
    parse_reference,
)
from orchestrator.trial.trust import BUNDLE_IN_CONTEXT, Trust, trusted_stage

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


def _orchestra_alias(facts: ImageFacts) -> bool:
    """Whether an image is one of orchestra's own bases under another name (an alias tag an
    older orchestra made): such a tag is never taken for the real image it is named after.
    An image built FROM a base inherits its labels, so the label alone does not tell: an
    alias is the base itself (tagged orchestra/base:..., or the single imported layer)."""
    if facts.labels.get(LABEL_IMAGE_KIND) != "base":
        return False
    return any(tag.startswith("orchestra/base:") for tag in facts.tags) or facts.layers <= 1


def facts_if_present(runtime: Runtime, ref: str) -> ImageFacts | None:
    """The engine's facts of `ref`, None when it has no such image. An engine that fails
    raises (RuntimeFault), and the trial waits for it like any other engine error: a sick
    engine is not a missing image (taken for one, a 6 s run of 500s once started a 97 s
    debootstrap of a base that was there, and could stand a base in for a present FROM)."""
    if not runtime.image_exists(ref):
        return None
    return runtime.image_facts(ref)


def _orchestra_base(runtime: Runtime, ref: str) -> bool:
    """Whether the engine's `ref` is one of orchestra's bases (under its own name or an alias)."""
    facts = facts_if_present(runtime, ref)
    return facts is not None and _orchestra_alias(facts)


def _local(runtime: Runtime, ref: str) -> ImageFacts | None:
    """The engine's image under `ref`, unless it is one of orchestra's bases by another name."""
    facts = facts_if_present(runtime, ref)
    return None if facts is None or _orchestra_alias(facts) else facts


def _own_base(ref: str) -> str | None:
    """The release, when a task names one of orchestra's bases itself."""
    if ref.startswith("orchestra/base:") and ref.split(":", 1)[1] in RELEASES:
        return ref.split(":", 1)[1]
    return None


def stand_in_for(runtime: Runtime, ref: str) -> StandIn | None:
    """None when the engine has the real `ref` (or it is orchestra's own base); else what
    would stand in should no registry answer (or BuildFailed: nothing near enough)."""
    if _own_base(ref) or _local(runtime, ref) is not None:
        return None
    chosen = choose(ref)
    if chosen is None:
        raise BuildFailed(
            f"FROM {ref}: not present locally, and no offline base is near enough to stand in "
            "should the pull fail (the Debian bases `orchestra images bootstrap` builds stand "
            "in for python, debian and ubuntu images). Load the image (`docker load`) or use one "
            "of those.")
    return chosen


BASES_MODES = ("auto", "pull", "offline")


class BaseBuildFailed(BuildFailed):
    """A build that failed, with what it was to start from (trial result: build_failure, bases)."""

    def __init__(self, message: str, failure: BuildFailure, bases: list[BaseImage]):
        super().__init__(message)
        self.failure, self.bases = failure, bases


@dataclass
class _Pull:
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False
    pulled: PulledImage | None = None
    failed: PullFailed | None = None


class JobBases:
    """One job's bases: its --bases mode, each reference pulled at most once (one puller,
    a lock per reference; a pull that failed is not tried again within the job), and a
    stand-in said once per reference (each trial records it all the same)."""

    def __init__(self, job: str, mode: str = "auto"):
        self.job, self.mode = job, mode
        self._pulls: dict[str, _Pull] = {}
        self._said: set[str] = set()
        self._guard = threading.Lock()

    def pull(self, runtime: Runtime, ref: str) -> PulledImage:
        """The reference pulled (now, or earlier in this job); PullFailed as the first try did."""
        with self._guard:
            entry = self._pulls.setdefault(ref, _Pull())
        with entry.lock:
            if not entry.done:
                started = time.monotonic()
                try:
                    entry.pulled = runtime.pull(ref)
                    log.info("image.base_pulled", reference=ref, digest=entry.pulled.digest,
                             seconds=round(time.monotonic() - started, 2))
                except PullFailed as exc:
                    entry.failed = exc
                entry.done = True
        if entry.failed is not None:
            raise entry.failed
        assert entry.pulled is not None
        return entry.pulled

    def tried(self, ref: str) -> bool:
        """Whether this job pulls or pulled `ref` (pull() then waits for it, or says how it went)."""
        with self._guard:
            return ref in self._pulls

    def first_saying(self, ref: str) -> bool:
        with self._guard:
            first = ref not in self._said
            self._said.add(ref)
            return first


_JOBS: dict[str, JobBases] = {}
_JOBS_GUARD = threading.Lock()


def _job_bases(job: str, mode: str | None = None) -> JobBases:
    """The job's bases (made on first use; `mode` given: the job's --bases)."""
    with _JOBS_GUARD:
        bases = _JOBS.get(job)
        if bases is None:
            bases = _JOBS[job] = JobBases(job, mode or "auto")
        elif mode is not None:
            bases.mode = mode
        return bases


@dataclass
class Resolved:
    """One FROM reference: the record a trial keeps, and the stand-in the build uses instead."""

    record: BaseImage
    stand_in: StandIn | None = None


def resolve_bases(runtime: Runtime, dockerfile: str, job: str = "", used_for: str = "task",
                  mode: str | None = None) -> list[Resolved]:
    """Each FROM reference of a Dockerfile, as Docker would have it: the engine's image
    when it has one; else pulled (the engine's mirrors and credentials), once per job; a
    stand-in only when no registry answered (--bases auto) or when asked (--bases offline).
    A registry that answers and refuses, or any failed pull under --bases pull, is the
    build's failure (BaseBuildFailed, naming the reference and the pull's error)."""
    bases = _job_bases(job, mode)
    return [_resolve(runtime, ref, bases, used_for) for ref in base_references(dockerfile)]


def _resolve(runtime: Runtime, ref: str, bases: JobBases, used_for: str) -> Resolved:
    from orchestrator.trial.baseimage import bootstrap_base  # it builds under image_lock, from here

    release = _own_base(ref)
    if release is not None:
        bootstrap_base(runtime, release)
        return Resolved(BaseImage(reference=ref, used_for=used_for, source="orchestra",
                                  image_id=runtime.image_facts(ref).id))
    # pulled (or being pulled) by this job: every trial's record says so, not "local"
    facts = None if bases.tried(ref) else _local(runtime, ref)
    if facts is not None:
        return Resolved(BaseImage(reference=ref, used_for=used_for, source="local", image_id=facts.id,
                                  digest=_digest_of(ref, facts.digests)))
    if bases.mode == "offline":
        return _stand_in(runtime, ref, bases, used_for, "--bases offline: not pulled", None)
    try:
        pulled = bases.pull(runtime, ref)
    except PullFailed as exc:
        if bases.mode == "pull" or not exc.unreachable:
            why = "--bases pull" if bases.mode == "pull" else "a registry answered and refused"
            record = BaseImage(reference=ref, used_for=used_for, source="failed", pull_error=str(exc))
            raise BaseBuildFailed(
                f"FROM {ref}: the pull failed ({why}; no stand-in): {exc}",
                BuildFailure(reference=ref, pull_error=str(exc), message=str(exc)), [record]) from exc
        return _stand_in(runtime, ref, bases, used_for, f"the pull failed: {exc}", str(exc))
    return Resolved(BaseImage(reference=ref, used_for=used_for, source="pulled", digest=pulled.digest,
                              image_id=pulled.id))


def _stand_in(runtime: Runtime, ref: str, bases: JobBases, used_for: str, reason: str,
              pull_error: str | None) -> Resolved:
    from orchestrator.trial.baseimage import bootstrap_base

    chosen = choose(ref)
    if chosen is None:
        message = (f"FROM {ref}: {reason}; and no offline base is near enough to stand in (the "
                   "Debian bases stand in for python, debian and ubuntu images). Load the image "
                   "(`docker load`) or make a registry reachable.")
        raise BaseBuildFailed(message, BuildFailure(reference=ref, pull_error=pull_error, message=message),
                              [BaseImage(reference=ref, used_for=used_for, source="failed",
                                         reason=reason, pull_error=pull_error)])
    bootstrap_base(runtime, chosen.release)
    say = log.warning if bases.first_saying(ref) else log.debug
    say("image.stand_in", reference=ref, stand_in=chosen.stand_in, python=chosen.python,
        reason=reason, choice=chosen.reason, warning=chosen.warning, job=bases.job)
    return Resolved(BaseImage(reference=ref, used_for=used_for, source="stand-in",
                              image_id=runtime.image_facts(chosen.stand_in).id,
                              stand_in=chosen.stand_in, python=chosen.python,
                              reason=f"{reason} ({chosen.reason})", warning=chosen.warning,
                              pull_error=pull_error), chosen)


def _digest_of(ref: str, digests: list[str]) -> str | None:
    """The manifest digest a local image came with from `ref`'s repository (None: built here)."""
    name = parse_reference(ref.split("@", 1)[0])
    for entry in digests:
        repository, _, digest = entry.partition("@")
        if parse_reference(repository).repository == name.repository:
            return digest
    return None


def with_stand_ins(dockerfile: str, stand_ins: list[StandIn]) -> str:
    """The Dockerfile with each stood-in FROM reference replaced by its stand-in."""
    swap = {s.reference: s.stand_in for s in stand_ins}
    if not swap:
        return dockerfile

    def replace(match: re.Match[str]) -> str:
        ref = match.group(1)
        return match.group(0).replace(ref, swap[ref], 1) if ref in swap else match.group(0)

    return _FROM.sub(replace, dockerfile)


def build_context(folder: Path, dockerfile: str, stand_ins: list[StandIn],
                  ca: bytes | None) -> BinaryIO:
    """The folder as a build context, its Dockerfile naming the stand-ins; with a CA
    bundle, trusted in every stage (trust.trusted_stage after each FROM), so `pip install`
    works behind a TLS-intercepting proxy. The task's own files are unchanged. A tar in a
    temporary file, streamed to the engine: a task's big data files are never in memory.
    BuildKit-only COPY --chmod is rewritten for the engine's classic builder (tasks/dockerfile.py)."""
    classic, rewritten = for_classic_builder(dockerfile)
    if not stand_ins and ca is None and not rewritten:
        return spool_tree(folder)
    if rewritten:
        log.info("image.classic_builder", folder=str(folder), rewritten=rewritten)
    lines = []
    for line in with_stand_ins(classic, stand_ins).splitlines():
        lines.append(line)
        if ca is not None and _FROM.match(line):
            lines.extend(trusted_stage())
    extra = {"Dockerfile": ("\n".join(lines) + "\n").encode()}
    if ca is not None:
        extra[BUNDLE_IN_CONTEXT] = ca
    return spool_tree(folder, extra)


def bases_suffix(resolved: list[Resolved], ca: bytes | None) -> str:
    """An image tag's part that changes with what it is built on and the CA it trusts: a
    re-pulled or rebuilt base, or a stand-in in place of the real image, is a new tag."""
    suffix = f"-ca{hashlib.sha256(ca).hexdigest()[:8]}" if ca is not None else ""
    ids = "".join(r.record.image_id or "" for r in resolved)
    return suffix + (f"-b{hashlib.sha256(ids.encode()).hexdigest()[:8]}" if ids else "")


def build_on_bases(runtime: Runtime, folder: Path, dockerfile: str, resolved: list[Resolved],
                   tag: str, labels: dict[str, str], timeout_sec: float, ca: bytes | None) -> None:
    """The one way orchestra builds an image from a task's folder (task image,
    tests/Dockerfile, a compose service's build): on the bases `resolve_bases` chose, with
    the CA bundle in every stage. A failed build names what it started from."""
    stand_ins = [r.stand_in for r in resolved if r.stand_in is not None]
    labels = {**labels, LABEL_STAND_INS: json.dumps([s.as_dict() for s in stand_ins])}
    try:
        with build_context(folder, dockerfile, stand_ins, ca) as context:
            runtime.build_image(context, tag, labels, timeout_sec)
    except BuildFailed as exc:
        if isinstance(exc, BaseBuildFailed) or not resolved:
            raise
        first = next((r for r in resolved if r.stand_in is not None), resolved[0])
        said = "; ".join(_said(r) for r in resolved)
        failure = BuildFailure(reference=first.record.reference,
                               stand_in=first.stand_in.stand_in if first.stand_in else None,
                               pull_error=first.record.pull_error, message=str(exc)[-2000:])
        raise BaseBuildFailed(f"{exc}\n[built on: {said}]", failure,
                              [r.record for r in resolved]) from exc


def _said(resolved: Resolved) -> str:
    record = resolved.record
    if record.stand_in:
        return f"FROM {record.reference} stood in by {record.stand_in} ({record.reason})"
    return f"FROM {record.reference} ({record.source}{', ' + record.digest if record.digest else ''})"


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
        dockerfile = TaskPaths(task.path).dockerfile.read_text()
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


LABEL_STAND_INS = "orchestra.image.stand_ins"  # what stood in, on the task image


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
    text = dockerfile.read_text()
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
