"""What the parts of the Docker runtime share: the mixins of engine.py, images.py,
networks.py, containers.py and execs.py all derive from `DockerState`, which gives them

- the runtime's state, typed here and set by DockerRuntime.__init__ (the package's
  __init__.py): the Engine API client, the subnet pool and the blocks this process's
  networks hold, the lock over those, and facts read once (Podman or not, an engine on this
  host or not, its loop disks);
- the lookups more than one part makes: whether containers of an OCI runtime run in
  gVisor, and whether an engine object exists;

and `_removed`, the idempotent removal of any engine object (container, network, volume,
image). docker-py's errors pass through here unchanged: DockerRuntime's seam turns them
into RuntimeFault around every public method.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.log import get_logger
from orchestrator.runtime.base import Runtime, RuntimeFault
from orchestrator.runtime.client import APIError, EngineClient, NotFound
from orchestrator.runtime.disk import LoopDisks
from orchestrator.runtime.subnets import Block, SubnetPool

log = get_logger()


class DockerState(Runtime):
    """The state and shared lookups of DockerRuntime's parts (never made by itself)."""

    api: EngineClient  # the Engine API client: tests read back from it
    subnets: SubnetPool
    _network_blocks: dict[str, Block]  # network name -> the block it holds
    _runtime_paths: dict[str, str] | None  # OCI runtime name -> its binary
    _ports_open: dict[str, list[int]]  # network name -> its gateway's ports this process opened
    _lock: threading.Lock  # over _network_blocks, _ports_open and _build_network
    _build_network: str | None  # None: not looked for yet; "": none can be isolated here
    podman: bool  # Podman's Docker-compatible API, where some calls differ (README "Engines")
    local_engine: bool  # the engine shares this host (its socket, or loopback TCP)
    _loop_disks: LoopDisks | None

    def _build_net(self) -> str | None:  # NetworksMixin's
        raise NotImplementedError

    def _is_gvisor(self, oci_runtime: str | None) -> bool:
        """Whether containers of this OCI runtime run in gVisor: its name, or the binary the
        engine runs for it (daemon.json may register runsc under any name)."""
        if not oci_runtime or oci_runtime in ("runc", "io.containerd.runc.v2", "crun"):
            return False
        if oci_runtime == "runsc":
            return True
        if self._runtime_paths is None:
            runtimes = self.api.info().get("Runtimes") or {}
            self._runtime_paths = {name: str((entry or {}).get("path") or name)
                                   for name, entry in runtimes.items()}
        return Path(self._runtime_paths.get(oci_runtime, oci_runtime)).name == "runsc"

    @staticmethod
    def _exists(inspect: Callable[[str], object], name: str) -> bool:
        try:
            inspect(name)
            return True
        except NotFound:
            return False


REMOVAL_WAIT_SEC = 30.0


def _removal_in_progress(exc: APIError) -> bool:
    return "in progress" in str(exc).lower()


def _removed(kind: str, name: str, remove: Callable[[], object], exists: Callable[[], bool],
             retry: Callable[[APIError], bool] = lambda exc: True,
             timeout: float = REMOVAL_WAIT_SEC) -> None:
    """Remove an engine object so that it is gone when this returns, whoever removed it.

    NotFound is success. Any other engine answer (409 "removal already in progress",
    "has active endpoints", "volume in use" while a container is still going) is looked
    at again: if the object is gone meanwhile, that is success; otherwise the removal is
    retried with backoff until `timeout`, and only then raised as a RuntimeFault naming
    the object. Two removers racing for one object both return normally.
    """
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            remove()
            return
        except NotFound:
            return
        except APIError as exc:
            if not exists():
                return
            if not retry(exc) or time.monotonic() >= deadline:
                raise RuntimeFault(f"{kind} {name[:64]} could not be removed: {exc}") from exc
            log.info("runtime.remove_waiting", kind=kind, name=name[:64], error=str(exc)[:200])
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
