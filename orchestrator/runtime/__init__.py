"""Where containers run. `base` is the seam: `Runtime` (20 abstract core operations, each
with its contract, and the optional parts in `Part`, declared in `Capabilities`) and the
types that cross it; `docker` the Docker (and Podman) engine backend; `fake` FakeRuntime,
the core in memory for tests; `client` docker-py's client (only `docker` uses it);
`firewall`, `disk` and `subnets` the host-side parts the Docker runtime enforces with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.runtime.base import (
        LABEL_IMAGE_KIND,
        LABEL_JOB,
        LABEL_KIND,
        LABEL_PID,
        LABEL_TRIAL,
        PART_METHODS,
        Attached,
        BuildFailed,
        Capabilities,
        ContainerLimits,
        ContainerSpec,
        DiskQuotas,
        EngineFacts,
        ExecResult,
        HealthProbe,
        ImageFacts,
        LoopDisk,
        Network,
        NotSupported,
        OwnedObject,
        Part,
        PulledImage,
        PullFailed,
        Runtime,
        RuntimeFault,
        VolumeMount,
    )
    from orchestrator.runtime.subnets import DEFAULT_RANGE, host_routes

__all__ = [
    "DEFAULT_RANGE", "LABEL_IMAGE_KIND", "LABEL_JOB", "LABEL_KIND", "LABEL_PID", "LABEL_TRIAL",
    "PART_METHODS", "Attached", "BuildFailed", "Capabilities", "ContainerLimits", "ContainerSpec",
    "DiskQuotas", "EngineFacts", "ExecResult", "HealthProbe", "ImageFacts", "LoopDisk", "Network",
    "NotSupported", "OwnedObject", "Part", "PullFailed", "PulledImage", "Runtime", "RuntimeFault", "VolumeMount",
    "host_routes", "open_runtime",
]
__getattr__, __dir__ = public_face(__name__, {
    "LABEL_IMAGE_KIND": "base",
    "LABEL_JOB": "base",
    "LABEL_KIND": "base",
    "LABEL_PID": "base",
    "LABEL_TRIAL": "base",
    "PART_METHODS": "base",
    "Attached": "base",
    "BuildFailed": "base",
    "Capabilities": "base",
    "ContainerLimits": "base",
    "ContainerSpec": "base",
    "DiskQuotas": "base",
    "EngineFacts": "base",
    "ExecResult": "base",
    "HealthProbe": "base",
    "ImageFacts": "base",
    "LoopDisk": "base",
    "Network": "base",
    "NotSupported": "base",
    "OwnedObject": "base",
    "Part": "base",
    "PullFailed": "base",
    "PulledImage": "base",
    "Runtime": "base",
    "RuntimeFault": "base",
    "VolumeMount": "base",
    "DEFAULT_RANGE": "subnets",
    "host_routes": "subnets",
})


def open_runtime(max_pool_size: int = 16) -> Runtime:
    """The container engine on this host (Docker: the one implementation that reaches an
    engine; imported here, lazily, so nothing else names it). Raises InfraError when no
    engine answers."""
    from orchestrator.runtime.docker import DockerRuntime

    return DockerRuntime(max_pool_size=max_pool_size)
