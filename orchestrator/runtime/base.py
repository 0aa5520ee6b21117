"""The runtime seam: everything trial.py needs from a container engine, and nothing more.

A second backend (Ray, DESIGN 6) wraps a node's Runtime; it does not widen this surface.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

LABEL_JOB = "orchestra.job"
LABEL_TRIAL = "orchestra.trial"
LABEL_KIND = "orchestra.kind"
LABEL_PID = "orchestra.pid"  # set only when orchestra creates an object: never on an image
# Images carry their own namespace: containers inherit an image's labels, so an image
# labelled orchestra.kind/orchestra.job would make other people's containers look like ours.
LABEL_IMAGE_KIND = "orchestra.image.kind"

# Docker's default capabilities minus what no agent needs (DESIGN 2 step 3). Package
# managers keep CHOWN, DAC_OVERRIDE, FOWNER, SETUID and SETGID.
TRIMMED_CAPABILITIES = ["NET_RAW", "MKNOD", "SYS_CHROOT", "SETFCAP", "AUDIT_WRITE"]


@dataclass
class VolumeMount:
    source: str  # a runtime volume name
    target: str  # a path in the container


@dataclass
class SandboxSpec:
    """One container to create. Quotas are the task's, applied as given."""

    image: str
    name: str
    labels: dict[str, str]
    command: list[str]
    cpus: float
    memory_mb: int
    pids_limit: int
    network: str  # a network name, or "none"
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    drop_all_capabilities: bool = False
    mounts: list[VolumeMount] = field(default_factory=list)
    read_only_binds: dict[str, str] = field(default_factory=dict)  # host path -> container path
    runtime: str | None = None  # OCI runtime, e.g. runsc (gVisor); None: the engine default
    log_max_size: str = "10m"
    aliases: list[str] = field(default_factory=list)  # names on `network` (compose services)
    entrypoint: list[str] | None = None
    healthcheck: dict | None = None  # Docker's HEALTHCHECK (durations in ns)


@dataclass
class Network:
    name: str
    gateway: str
    subnet: str
    internal: bool
    host_isolation: str = "none"  # iptables: only its own gateway on the host is reachable


@dataclass
class ExecResult:
    exit_code: int | None  # None: the process did not finish (container killed)
    timed_out: bool
    output: bytes = b""


class Runtime(Protocol):
    # images
    def image_exists(self, ref: str) -> bool: ...
    def build_image(self, context_tar: bytes, tag: str, labels: dict[str, str],
                    timeout_sec: float) -> None: ...
    def tag_image(self, source: str, target: str) -> None: ...
    def commit(self, container: str, repository: str, tag: str,
               labels: dict[str, str]) -> str: ...
    def remove_image(self, ref: str) -> None: ...
    # networks and volumes
    def create_network(self, name: str, internal: bool, labels: dict[str, str]) -> Network: ...
    def remove_network(self, name: str) -> None: ...
    def create_bind_volume(self, name: str, host_path: str, labels: dict[str, str]) -> str: ...
    def remove_volume(self, name: str) -> None: ...
    # containers
    def create(self, spec: SandboxSpec) -> str: ...
    def start(self, container: str) -> None: ...
    def exec(self, container: str, command: list[str], *, deadline: float,
             env: dict[str, str] | None = None, workdir: str | None = None,
             user: str | None = None) -> ExecResult: ...
    def wait(self, container: str, timeout_sec: float) -> int | None: ...
    def put_archive(self, container: str, path: str, tar_bytes: bytes) -> None: ...
    def get_archive(self, container: str, path: str) -> Iterator[bytes] | None: ...
    def inspect(self, container: str) -> dict: ...
    def kill(self, container: str) -> None: ...
    def remove(self, container: str) -> None: ...
    def writable_layer_bytes(self, job: str) -> dict[str, int]: ...
