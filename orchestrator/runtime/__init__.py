"""Where containers run. `base` is the seam: `Runtime` (20 abstract core operations, each
with its contract, and the optional parts in `Part`, declared in `Capabilities`); `values`
the types that cross it; `docker` the Docker (and Podman) engine backend; `fake` FakeRuntime,
the core in memory for tests; `client` docker-py's client (only `docker` uses it);
`registries` which registries may be sent the user's credentials;
`firewall`, `disk` and `subnets` the host-side parts the Docker runtime enforces with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.runtime.base import (
        PART_METHODS,
        Attached,
        BuildFailed,
        Capabilities,
        DiskQuotas,
        NotSupported,
        Part,
        Runtime,
        RuntimeFault,
    )
    from orchestrator.runtime.registries import trust_registry
    from orchestrator.runtime.subnets import DEFAULT_RANGE, host_routes
    from orchestrator.runtime.values import (
        LABEL_IMAGE_KIND,
        LABEL_JOB,
        LABEL_KIND,
        LABEL_PID,
        LABEL_TRIAL,
        ContainerLimits,
        ContainerSpec,
        EngineFacts,
        ExecResult,
        HealthProbe,
        ImageFacts,
        LoopDisk,
        Network,
        OwnedObject,
        PulledImage,
        PullFailed,
        VolumeMount,
    )

__all__ = [
    "DEFAULT_RANGE", "LABEL_IMAGE_KIND", "LABEL_JOB", "LABEL_KIND", "LABEL_PID", "LABEL_TRIAL",
    "PART_METHODS", "Attached", "BuildFailed", "Capabilities", "ContainerLimits", "ContainerSpec",
    "DiskQuotas", "EngineFacts", "ExecResult", "HealthProbe", "ImageFacts", "LoopDisk", "Network",
    "NotSupported", "OwnedObject", "Part", "PullFailed", "PulledImage", "Runtime", "RuntimeFault", "VolumeMount",
    "host_routes", "open_runtime", "trust_registry",
]
__getattr__, __dir__ = public_face(__name__, {
    "LABEL_IMAGE_KIND": "values",
    "LABEL_JOB": "values",
    "LABEL_KIND": "values",
    "LABEL_PID": "values",
    "LABEL_TRIAL": "values",
    "PART_METHODS": "base",
    "Attached": "base",
    "BuildFailed": "base",
    "Capabilities": "base",
    "ContainerLimits": "values",
    "ContainerSpec": "values",
    "DiskQuotas": "base",
    "EngineFacts": "values",
    "ExecResult": "values",
    "HealthProbe": "values",
    "ImageFacts": "values",
    "LoopDisk": "values",
    "Network": "values",
    "NotSupported": "base",
    "OwnedObject": "values",
    "Part": "base",
    "PullFailed": "values",
    "PulledImage": "values",
    "Runtime": "base",
    "RuntimeFault": "base",
    "VolumeMount": "values",
    "DEFAULT_RANGE": "subnets",
    "host_routes": "subnets",
    "trust_registry": "registries",
})


def open_runtime(max_pool_size: int = 16) -> Runtime:
    """The container engine on this host (Docker: the one implementation that reaches an
    engine; imported here, lazily, so nothing else names it). Raises InfraError when no
    engine answers."""
    from orchestrator.runtime.docker import DockerRuntime

    return DockerRuntime(max_pool_size=max_pool_size)
