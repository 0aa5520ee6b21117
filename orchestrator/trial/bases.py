"""What each FROM of a task's Dockerfile starts from (DESIGN 2.2, 5), and the one way
orchestra builds on it.

- `resolve_bases`: the engine's image when it has one; else pulled through the engine's
  mirrors and credentials, once per job (`JobBases`); a stand-in (one of orchestra's Debian
  bases, chosen by rule in tasks/standins.py) only when no registry answered or when the job
  said `--bases offline`. Each reference gives a `Resolved`: the record a trial keeps.
- `build_on_bases`: the build context with the stand-ins named in its Dockerfile and the CA
  bundle trusted in every stage; a failed build names what it started from
  (`BaseBuildFailed`). No tag is ever made or moved for a reference that stood in.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from orchestrator.archive import spool_tree
from orchestrator.log import get_logger
from orchestrator.models import BaseImage, BuildFailure
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
    choose,
    expand_args,
    for_classic_builder,
    global_args,
    parse_reference,
)
from orchestrator.trial.trust import BUNDLE_IN_CONTEXT, trusted_stage

log = get_logger()

_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)
LABEL_STAND_INS = "orchestra.image.stand_ins"  # what stood in, on the task image


def base_references(dockerfile: str) -> list[str]:
    """The external images a Dockerfile starts FROM (stage names excluded), each read with
    the global ARGs' defaults (`FROM ${BASE}`: the image BASE names)."""
    stages: set[str] = set()
    refs = []
    args = global_args(dockerfile) if "$" in dockerfile else {}
    for line in dockerfile.splitlines():
        match = _FROM.match(line)
        if not match:
            continue
        ref = expand_args(match.group(1), args)
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

    args = global_args(dockerfile) if "$" in dockerfile else {}

    def replace(match: re.Match[str]) -> str:
        written = match.group(1)
        ref = expand_args(written, args)
        return match.group(0).replace(written, swap[ref], 1) if ref in swap else match.group(0)

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
