"""The Docker engine backend, on docker-py's low-level client (client.py; DESIGN 7: no
subprocess per step): the local socket, tcp:// with TLS, ssh://, a Docker context or
Podman's compatible socket.

Containers are created and started, never `run()` (which auto-pulls). Every object made
here carries orchestra's labels, so `cleanup` and the reaper find them. docker-py's errors
never leave this package: every public method turns them into RuntimeFault (the engine
failed: infrastructure) or BuildFailed (the task's image cannot be had).

The package, read in this order: `shared` (the state every part shares, typed; idempotent
removal), then one mixin per part of the engine: `engine`, `images`, `networks` (and
volumes), `containers`, `execs` (commands run in a container). This module: `connect`, the
seam, and `DockerRuntime`, composed of the parts. The seam wraps every public method the
class has, wherever it is defined (a part, the class itself, or a subclass: tests make
them), exactly once.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from orchestrator.errors import InfraError
from orchestrator.runtime.base import BuildFailed, Runtime, RuntimeFault
from orchestrator.runtime.client import BROKEN_STREAM, DockerException, EngineClient
from orchestrator.runtime.disk import LoopDisks, loop_disks_available
from orchestrator.runtime.docker.containers import ContainersMixin
from orchestrator.runtime.docker.engine import EngineMixin
from orchestrator.runtime.docker.execs import ExecMixin
from orchestrator.runtime.docker.images import ImagesMixin
from orchestrator.runtime.docker.networks import NetworksMixin
from orchestrator.runtime.subnets import Block, SubnetPool

__all__ = ["BuildFailed", "DockerRuntime", "RuntimeFault", "connect"]

P = ParamSpec("P")
R = TypeVar("R")
_SEAMED: weakref.WeakSet[Callable[..., object]] = weakref.WeakSet()  # the seam's own wrappers


def connect(max_pool_size: int = 16) -> EngineClient:
    try:
        return EngineClient(timeout=120, max_pool_size=max_pool_size)
    except (OSError, DockerException, ValueError) as exc:
        raise InfraError(
            f"Docker engine unreachable ({exc.__class__.__name__}: {exc}). "
            "Start dockerd (or run `make docker`) and retry."
        ) from exc


def _is_local(base_url: str) -> bool:
    """The engine shares this host: its socket is here, or its TCP address is loopback."""
    scheme, _, rest = base_url.partition("://")
    host = rest.rsplit("@", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return scheme in ("unix", "npipe", "") or (scheme in ("tcp", "http", "https")
                                               and host in ("localhost", "127.0.0.1", "::1"))


def _at_the_seam(method: Callable[P, R]) -> Callable[P, R]:
    """docker-py's errors become orchestra's: the engine failed (RuntimeFault)."""
    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (RuntimeFault, BuildFailed):
            raise
        except DockerException as exc:
            raise RuntimeFault(f"the engine failed: {exc}") from exc
        except BROKEN_STREAM as exc:  # urllib3's, which are not OSErrors
            raise RuntimeFault(f"the engine connection broke: {exc.__class__.__name__}: {exc}") from exc
    _SEAMED.add(call)
    return call


def _wrap_public(cls: type) -> None:
    """Every public method `cls` has passes the seam, wherever it is defined: on `cls`, on a
    part (mixin) or class it derives from, but not one only the abstract Runtime declares.
    Each is wrapped on `cls` once: what a parent class already wrapped is left as it is."""
    abstract = set(Runtime.__mro__)  # Runtime, ABC, object
    names = sorted({name for klass in cls.__mro__ if klass not in abstract for name in vars(klass)
                    if not name.startswith("_")})
    for name in names:
        owner = next(klass for klass in cls.__mro__ if name in vars(klass))
        value = vars(owner)[name]
        if owner in abstract or not callable(value) or value in _SEAMED \
                or isinstance(value, (staticmethod, classmethod, type)):
            continue
        setattr(cls, name, _at_the_seam(value))


class DockerRuntime(EngineMixin, ImagesMixin, NetworksMixin, ContainersMixin, ExecMixin):
    """The Runtime on a Docker (or Podman) engine: its parts' methods, behind the seam."""

    def __init_subclass__(cls, **kwargs: object) -> None:  # a subclass's methods meet the seam too
        super().__init_subclass__(**kwargs)
        _wrap_public(cls)

    def __init__(self, engine: EngineClient | None = None, max_pool_size: int = 16):
        self.api = engine or connect(max_pool_size)  # the Engine API client: tests read back from it
        self.subnets = SubnetPool()
        self._network_blocks: dict[str, Block] = {}
        self._ports_open: dict[str, list[int]] = {}
        self._build_network: str | None = None
        self._runtime_paths: dict[str, str] | None = None  # OCI runtime name -> its binary
        self._lock = threading.Lock()
        # Podman's Docker-compatible API, where some calls differ (README "Engines")
        self.podman = bool(getattr(self.api, "podman", False))
        self.volume_copy_up = not self.podman
        # facts of this process and its engine's address, read once (every trial asks)
        self.local_engine = _is_local(self.api.base_url)
        self._loop_disks = LoopDisks() if self.local_engine and loop_disks_available() else None


_wrap_public(DockerRuntime)
