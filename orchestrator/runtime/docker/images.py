"""Images, as a part of DockerRuntime (`ImagesMixin`): their facts, whether one exists,
building from a context tarball, pulling and pushing, whether a registry accepts the
credentials before a push, tagging, committing a container, importing a root filesystem,
removing (idempotent), and listing those with a label.

An image the task's input cannot give (a build the engine refuses or that fails or runs
past its timeout, a pull the registry refuses) raises BuildFailed; a refused push, or the
engine or its connection failing, raises RuntimeFault.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import BinaryIO

from orchestrator.runtime.base import BuildFailed, ImageFacts, PulledImage, PullFailed, RuntimeFault
from orchestrator.runtime.client import TRANSPORT_ERRORS, APIError, ImageNotFound
from orchestrator.runtime.docker.shared import DockerState, _removal_in_progress, _removed
from orchestrator.util import JsonObject


class ImagesMixin(DockerState):
    def image_facts(self, ref: str) -> ImageFacts:
        info = self.api.inspect_image(ref)
        config = info.get("Config") or {}
        return ImageFacts(id=info["Id"], tags=list(info.get("RepoTags") or []),
                          labels=dict(config.get("Labels") or {}), env=list(config.get("Env") or []),
                          workdir=config.get("WorkingDir") or "", size=int(info.get("Size") or 0),
                          created=_created(info.get("Created")),
                          digests=list(info.get("RepoDigests") or []),
                          layers=len((info.get("RootFS") or {}).get("Layers") or []))

    def import_image(self, tarball: str, repository: str, tag: str, changes: list[str]) -> None:
        self.api.import_image_from_file(tarball, repository=repository, tag=tag, changes=changes)

    def image_exists(self, ref: str) -> bool:
        try:
            self.api.inspect_image(ref)
            return True
        except ImageNotFound:
            return False

    def build_image(self, context_tar: bytes | BinaryIO, tag: str, labels: dict[str, str],
                    timeout_sec: float) -> None:
        tail: list[str] = []
        started = time.monotonic()
        try:
            stream = self.api.build(context_tar, tag=tag, labels=labels,
                                    timeout=int(timeout_sec) + 30, network_mode=self._build_net())
            for chunk in stream:
                if "stream" in chunk:
                    tail = (tail + chunk["stream"].splitlines())[-30:]
                if "error" in chunk:
                    raise BuildFailed(chunk["error"].strip() + "\n" + "\n".join(tail[-10:]))
                if time.monotonic() - started > timeout_sec:
                    raise BuildFailed(f"build exceeded build_timeout_sec={timeout_sec:g}")
        except APIError as exc:
            if exc.status_code is not None and exc.status_code < 500:
                raise BuildFailed(f"{exc}") from exc  # the engine refused this build's input
            raise RuntimeFault(f"the engine failed during the build: {exc}") from exc
        except TRANSPORT_ERRORS as exc:  # the connection to the engine: infrastructure, retried
            raise RuntimeFault(f"the engine failed during the build: {exc.__class__.__name__}: {exc}") from exc

    def pull(self, ref: str, timeout_sec: float = 600) -> PulledImage:
        """Pull an image as `docker pull` would: the engine's registry mirrors, and the Docker
        config's credentials for its registry (docker-py reads them). PullFailed with the
        engine's reason when it brings none, `unreachable` when no registry answered."""
        repository, tag, local = split_reference(ref)
        digest: str | None = None
        try:
            for chunk in self.api.pull(repository, tag):
                if "error" in chunk:
                    reason = str(chunk["error"]).strip()
                    raise PullFailed(f"pull {ref}: {reason}", unreachable=unreachable(reason))
                status = str(chunk.get("status") or "")
                if status.startswith("Digest: "):
                    digest = status.removeprefix("Digest: ").strip()
        except APIError as exc:
            reason = str(exc.explanation or exc)
            raise PullFailed(f"pull {ref}: {reason}", unreachable=unreachable(reason)) from exc
        except TRANSPORT_ERRORS as exc:
            raise RuntimeFault(f"the engine failed during the pull of {ref}: {exc}") from exc
        try:
            info = self.api.inspect_image(local)
        except ImageNotFound:
            raise PullFailed(f"pull {ref}: the engine reported no image", unreachable=False) from None
        if digest is None:  # an engine that does not say it in the stream: the image's own record
            name = _normalized(repository)
            digest = next((d.split("@", 1)[1] for d in info.get("RepoDigests") or []
                           if _normalized(d.split("@", 1)[0]) == name), None)
        return PulledImage(ref=ref, id=info["Id"], digest=digest)

    def push(self, ref: str, timeout_sec: float = 600) -> None:
        repository, _, tag = ref.rpartition(":")
        self._transfer("push", ref, self.api.push, repository, tag, RuntimeFault)

    @staticmethod
    def _transfer(verb: str, ref: str, call: Callable[[str, str], Iterable[JsonObject]],
                  repository: str, tag: str, refused: type[Exception]) -> None:
        """A pull or push streamed to its end: the registry's refusal raises `refused`, a
        broken engine connection RuntimeFault."""
        try:
            for chunk in call(repository, tag):
                if "error" in chunk:
                    raise refused(f"{verb} {ref}: {chunk['error']}")
        except APIError as exc:
            raise refused(f"{verb} {ref}: {exc}") from exc
        except TRANSPORT_ERRORS as exc:
            raise RuntimeFault(f"the engine failed during the {verb} of {ref}: {exc}") from exc

    def registry_refusal(self, registry: str) -> str | None:
        host = registry.split("/", 1)[0]
        try:
            self.api.login(host)
        except APIError as exc:
            return str(exc.explanation or exc)
        except TRANSPORT_ERRORS as exc:
            return f"{exc.__class__.__name__}: {exc}"
        return None

    def tag_image(self, source: str, target: str) -> None:
        repository, _, tag = target.rpartition(":")
        self.api.tag(source, repository, tag)

    def commit(self, container: str, repository: str, tag: str, labels: dict[str, str],
               env: list[str] | None = None) -> str:
        """Snapshot a container. `env` replaces the container's environment in the image,
        so secrets given to the agent never reach a verifier started from the snapshot."""
        conf: JsonObject = {"Labels": labels}
        if env is not None:
            conf["Env"] = env
        return self.api.commit(container, repository=repository, tag=tag, conf=conf)["Id"]

    def remove_image(self, ref: str) -> None:
        """Idempotent: an image already gone is success. A conflict (a child image, a
        container still using it) is not waited on: it lasts, so it is raised at once."""
        _removed("image", ref, lambda: self.api.remove_image(ref, force=True),
                 lambda: self.image_exists(ref), retry=_removal_in_progress)

    def images_labelled(self, label: str) -> list[ImageFacts]:
        return [ImageFacts(id=row["Id"], tags=list(row.get("RepoTags") or []),
                           labels=dict(row.get("Labels") or {}), size=int(row.get("Size") or 0),
                           created=_created(row.get("Created")), parent=str(row.get("ParentId") or ""))
                for row in self.api.images(filters={"label": label})]

    def image_tree(self) -> dict[str, tuple[str, int]]:
        return {row["Id"]: (str(row.get("ParentId") or ""), int(row.get("Size") or 0))
                for row in self.api.images(all_images=True)}


# What the engine says when no registry answered (the name does not resolve, nothing listens,
# no route, TLS that cannot be verified, a proxy in the way), as against a registry's refusal.
_UNREACHABLE = ("dial tcp", "no such host", "connection refused", "network is unreachable",
                "no route to host", "i/o timeout", "timeout", "deadline exceeded", "tls:", "x509:",
                "connection reset", "server misbehaving", "proxyconnect", "eof", "temporary failure")


def unreachable(reason: str) -> bool:
    """Whether a failed pull's reason says no registry answered."""
    text = reason.lower()
    return any(word in text for word in _UNREACHABLE)


def split_reference(ref: str) -> tuple[str, str, str]:
    """(repository, tag or digest, the local name the pulled image is found by) of a
    [registry/]repository[:tag][@digest] reference: a digest wins over a tag, as in docker pull."""
    name, _, digest = ref.partition("@")
    repository, tag = name, "latest"
    if ":" in name.rsplit("/", 1)[-1]:
        repository, tag = name.rsplit(":", 1)
    if digest:
        return repository, digest, f"{repository}@{digest}"
    return repository, tag, f"{repository}:{tag}"


def _normalized(repository: str) -> str:
    for prefix in ("docker.io/", "index.docker.io/"):
        repository = repository.removeprefix(prefix)
    return repository.removeprefix("library/")


def _created(value: object) -> float:
    """An image's creation time: seconds (the list) or an RFC 3339 string (inspect)."""
    if isinstance(value, (int, float)):
        return float(value)
    try:
        import datetime as dt

        return dt.datetime.fromisoformat(str(value)[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return 0.0
