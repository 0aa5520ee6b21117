"""Where containers run. `base` is the seam; `docker` the local Docker engine backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.runtime.base import Runtime


def open_runtime(max_pool_size: int = 16) -> Runtime:
    """The container engine on this host (Docker: the one implementation; imported here,
    lazily, so nothing else names it). Raises InfraError when no engine answers."""
    from orchestrator.runtime.docker import DockerRuntime

    return DockerRuntime(max_pool_size=max_pool_size)
