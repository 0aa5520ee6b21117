"""The values that cross the runtime seam (runtime/base.py `Runtime`): the labels orchestra
puts on what it makes, a container's spec, a network, the engine's and an image's facts, a
container's quotas read back, how an exec ended, what a pull brought, what orchestra owns.
Plain dataclasses: no engine client's types leave the runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.errors import BuildFailed

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
class ContainerSpec:
    """One container to create. Quotas are the task's, applied as given."""

    image: str
    name: str
    labels: dict[str, str]
    command: list[str] | None  # None: the image's own CMD (a compose service without one)
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
    healthcheck: HealthProbe | None = None  # a compose service's healthcheck


@dataclass
class HealthProbe:
    """A container healthcheck, as Docker's HEALTHCHECK and compose define it."""

    test: list[str]  # ["CMD", ...] or ["CMD-SHELL", "..."]
    interval_sec: float = 30.0
    timeout_sec: float = 30.0
    retries: int = 3
    start_period_sec: float = 0.0

    @property
    def longest_wait_sec(self) -> float:
        """How long the engine may take to call it unhealthy."""
        return self.start_period_sec + self.retries * (self.interval_sec + self.timeout_sec)


@dataclass
class Network:
    """A trial's network, and the topology between its containers and this host.

    `gateway` is the address at which the network's containers reach the host orchestra
    runs on, and an address of this host that its services for the trial (model proxy,
    relay, egress proxy) bind to: they listen on `gateway` and tell the agent
    `http://<gateway>:<port>`. On Docker it is the bridge's gateway; a runtime whose
    containers reach the host some other way gives that address here (the fake: 127.0.0.1).
    `internal`: no route out of it but the host's services. `host_isolation`: "iptables"
    when the host refuses the network everything but the ports `open_host_ports` opened,
    "none" otherwise."""

    name: str
    gateway: str
    subnet: str
    internal: bool
    host_isolation: str = "none"  # iptables: on the host, only its gateway's opened ports


@dataclass
class EngineFacts:
    """What the engine says about itself, in orchestra's terms."""

    cpus: float
    memory_mb: int
    oci_runtimes: list[str]
    version: str = ""
    kind: str = "docker"  # docker | podman
    data_root: str = ""  # where it keeps images and writable layers (on its host)
    # Names this engine among those a host may talk to (Docker's ID; another socket is another
    # engine): what orchestra keeps per engine (the network pool) is kept under it.
    engine_id: str = ""


@dataclass
class LoopDisk:
    """One trial's disk quota: an ext4 image mounted on this host (runtime/disk.py)."""

    image: Path
    mountpoint: Path

    @property
    def work(self) -> Path:
        return self.mountpoint / "work"

    @property
    def logs(self) -> Path:
        return self.mountpoint / "logs"


@dataclass
class ImageFacts:
    """One image, read back."""

    id: str
    tags: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    env: list[str] = field(default_factory=list)
    workdir: str = ""
    size: int = 0
    created: float = 0.0
    digests: list[str] = field(default_factory=list)  # repository@sha256:..., where it came from a registry
    layers: int = 0  # filesystem layers (an imported root filesystem has one)
    parent: str = ""  # the image it was built on (its last build step's), "" when pulled or imported


@dataclass
class OwnedObject:
    """One container, network or volume orchestra created (it carries LABEL_PID), as the
    reaper and `orchestra cleanup` see it: what it is, its name (a container's id), its labels."""

    kind: Literal["container", "network", "volume"]
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class PulledImage:
    """What a pull brought: the reference asked for, the local image id, the registry's
    manifest digest (sha256:...), as the engine reported it."""

    ref: str
    id: str
    digest: str | None = None


class PullFailed(BuildFailed):
    """A pull that brought no image. `unreachable`: no registry answered (no route, no name,
    refused connection, TLS failure: an air-gapped host), as against a registry that
    answered and refused (no such image, no access)."""

    def __init__(self, message: str, unreachable: bool):
        super().__init__(message)
        self.unreachable = unreachable


@dataclass
class ContainerLimits:
    """The quotas a container really got, read back from the engine."""

    nano_cpus: int | None = None
    memory_bytes: int | None = None
    memswap_bytes: int | None = None
    pids_limit: int | None = None  # the container's processes (under gVisor: its RLIMIT_NPROC)
    host_pids_limit: int | None = None  # the host cgroup's (under gVisor it counts gVisor's threads)
    cap_drop: list[str] = field(default_factory=list)
    cap_add: list[str] = field(default_factory=list)
    security_opt: list[str] = field(default_factory=list)
    init: bool | None = None
    network: str | None = None
    log_max_size: str | None = None
    oci_runtime: str | None = None


@dataclass
class ExecResult:
    """How a command run by `Runtime.exec` ended."""

    exit_code: int | None  # None: the process did not finish (deadline, stop, container killed)
    timed_out: bool  # the deadline passed first
    output: bytes = b""  # stdout and stderr interleaved, at most `capture` bytes
