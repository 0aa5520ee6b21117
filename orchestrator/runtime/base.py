"""The runtime seam: everything orchestra's phases need from a container engine.

Where trials run (threads on this host, or Ray nodes) is the executor's business
(orchestrator/executors); each node runs trials against its own Runtime.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

# The seam's faults are the kernel's (errors.py draws the tree), named here for its callers.
from orchestrator.errors import BuildFailed as BuildFailed
from orchestrator.errors import RuntimeFault as RuntimeFault

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


class DiskQuotas(ABC):
    """Per-trial disk quotas, as a runtime offers them (runtime/disk.py: loop disks on this
    host). Disks are grouped by job and by the process that made them."""

    @abstractmethod
    def create(self, job: str, name: str, size_mb: int) -> LoopDisk: ...
    @abstractmethod
    def remove(self, disk: LoopDisk) -> None: ...
    @abstractmethod
    def mounted(self, job: str, own: bool = True) -> list[str]:
        """A job's disks still mounted: this process's, or with own=False every process's."""
    @abstractmethod
    def reap(self, job: str | None = None, own: bool = False) -> int:
        """Unmount and delete a job's disks (None: every job's); how many."""
    @abstractmethod
    def reap_dead_owners(self, alive: Callable[[int], bool]) -> int:
        """Disks whose making process is gone (`alive(pid)` says)."""


@dataclass
class Capabilities:
    """What this runtime can enforce, declared before any spend: the job's pre-flight reads
    it (a job that needs what is missing stops with exit 2; a weaker enforcement is said
    once, before the first trial) and the job's result records it."""

    disk_quota: str  # "loop-volume": ENOSPC at the quota, plus the watchdog; "watchdog" alone
    host_isolation: str  # "iptables": a trial's network reaches only its own ports here; "none"
    oci_runtimes: list[str]
    local_engine: bool  # the engine shares this host (its bind mounts and cgroups are ours)
    registry_push: bool = True  # `--registry` can push (registry_refusal checks a registry)
    why: dict[str, str] = field(default_factory=dict)  # per capability not held: the reason


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
    exit_code: int | None  # None: the process did not finish (container killed)
    timed_out: bool
    output: bytes = b""


class Attached(ABC):
    """A command running with its stdin and stdout attached (`Runtime.attach`): a duplex
    byte stream to a process in a container (the ACP client speaks JSON-RPC over it). Its
    stderr is not read: redirect it. One thread uses it at a time."""

    @abstractmethod
    def send(self, data: bytes, timeout: float) -> None:
        """Write to its stdin; OSError (TimeoutError included) when it does not take it."""
    @abstractmethod
    def recv(self, timeout: float) -> bytes | None:
        """Its next stdout bytes; b"" once its stream has ended; None when nothing came
        within `timeout` seconds."""
    @abstractmethod
    def close_stdin(self) -> None:
        """End its stdin (EOF); never fails."""
    @abstractmethod
    def exit_code(self) -> int | None:
        """How it ended; None while it runs (or when the engine no longer knows)."""
    @abstractmethod
    def close(self) -> None:
        """Drop the stream (the process runs on until it ends or is killed); never fails."""




class Runtime(ABC):
    """What every phase (images, sandbox, trial, steps, verify, collect, workers, cleanup,
    the watchdog) may ask of a container engine. `DockerRuntime` is the one implementation
    and its package (docker/) the only code that uses the engine client (client.py,
    docker-py); `open_runtime()` makes one.

    Errors: an engine failure raises `RuntimeFault` (or the client's transport errors, which
    the CLI reports as the engine failing); a Dockerfile that does not build raises
    `BuildFailed`. Removals are idempotent: what is already gone is success."""

    # An empty named volume is filled with what the image has at its mount point (Docker);
    # where not (Podman), orchestra does not put a volume over the workdir.
    volume_copy_up: bool = True

    # ---- the engine ----------------------------------------------------------------
    @abstractmethod
    def engine_facts(self) -> EngineFacts:
        """CPUs, memory, the OCI runtimes it can start containers under, its kind."""
    @abstractmethod
    def data_root_space(self, facts: EngineFacts | None = None) -> tuple[int, int] | None:
        """(free, total) bytes of the filesystem under the engine's data root, or None where
        it cannot be read from here (an engine on another host)."""
    @abstractmethod
    def unanswered(self, timeout_sec: float = 5.0) -> str | None:
        """None when the engine answers a ping within the timeout, else why not (never
        raises: the job's engine watch asks it while the engine may be gone)."""
    @abstractmethod
    def capabilities(self, facts: EngineFacts | None = None) -> Capabilities:
        """What it can enforce (disk quota, host isolation, OCI runtimes), with reasons;
        `facts`: engine_facts() when the caller has them (one engine call fewer)."""
    @abstractmethod
    def loop_disks(self) -> DiskQuotas | None:
        """Per-trial disk quotas on this host; None where the engine cannot use them (not
        root, no mkfs.ext4 or loop devices, or an engine on another host)."""

    # ---- images --------------------------------------------------------------------
    @abstractmethod
    def image_exists(self, ref: str) -> bool: ...
    @abstractmethod
    def image_facts(self, ref: str) -> ImageFacts:
        """A local image's id, tags, labels, environment, working directory, size."""
    @abstractmethod
    def build_image(self, context_tar: bytes | BinaryIO, tag: str, labels: dict[str, str],
                    timeout_sec: float) -> None: ...
    @abstractmethod
    def pull(self, ref: str, timeout_sec: float = 600) -> PulledImage:
        """`ref` from its registry as the engine pulls it (its registry mirrors, the Docker
        config's credentials); PullFailed with the engine's reason when it brings none."""
    @abstractmethod
    def push(self, ref: str, timeout_sec: float = 600) -> None:
        """A local image to its registry (`--registry`), with the Docker config's
        credentials; RuntimeFault with the registry's reason."""
    @abstractmethod
    def registry_refusal(self, registry: str) -> str | None:
        """Pre-flight for `--registry`: None when the registry accepts the credentials the
        Docker config holds for it (or none are configured: the push will tell), else its
        reason."""
    @abstractmethod
    def import_image(self, tarball: str, repository: str, tag: str, changes: list[str]) -> None:
        """A root filesystem tarball as an image (the offline base)."""
    @abstractmethod
    def tag_image(self, source: str, target: str) -> None: ...
    @abstractmethod
    def commit(self, container: str, repository: str, tag: str, labels: dict[str, str],
               env: list[str] | None = None) -> str:
        """Snapshot a container; `env` replaces its environment in the image."""
    @abstractmethod
    def remove_image(self, ref: str) -> None: ...
    @abstractmethod
    def images_labelled(self, label: str) -> list[ImageFacts]: ...

    # ---- networks and volumes ------------------------------------------------------
    @abstractmethod
    def create_network(self, name: str, internal: bool, labels: dict[str, str]) -> Network: ...
    @abstractmethod
    def remove_network(self, name: str) -> None: ...
    @abstractmethod
    def adopt_network(self, name: str) -> Network | None:
        """A network made earlier (by this or another process): its addresses, with its
        host isolation re-checked; None if it is gone or any container (running or not) is on it."""
    def open_host_ports(self, network: Network, ports: list[int]) -> list[int] | None:
        """Exactly `ports` of the network's gateway open to its containers (the trial's own
        relay and proxies), read back; None where the runtime cannot isolate the host."""
        return None

    @abstractmethod
    def connect_network(self, container: str, network: str) -> None: ...
    @abstractmethod
    def connect_network_if_absent(self, container: str, network: str) -> None: ...
    @abstractmethod
    def disconnect_network(self, container: str, network: str) -> None: ...
    @abstractmethod
    def create_bind_volume(self, name: str, host_path: str, labels: dict[str, str]) -> str: ...
    @abstractmethod
    def create_volume(self, name: str, labels: dict[str, str]) -> str: ...
    @abstractmethod
    def remove_volume(self, name: str) -> None: ...

    # ---- containers ----------------------------------------------------------------
    @abstractmethod
    def create(self, spec: ContainerSpec) -> str: ...
    @abstractmethod
    def start(self, container: str) -> None: ...
    @abstractmethod
    def exec(self, container: str, command: list[str], *, deadline: float | None = None,
             env: dict[str, str] | None = None, workdir: str | None = None,
             user: str | None = None, stdin: bytes | None = None, capture: int = 0,
             stop: threading.Event | None = None) -> ExecResult:
        """Run a command and wait for it, until `deadline` (time.time(); default 60 s) or
        `stop`. `stdin` is fed to it; `capture` > 0 keeps up to that many bytes of its
        output (stdout and stderr), else output is not read at all (agent commands write
        their own logs, so a flood lands on the trial's disk, not here). `timed_out` when
        the deadline passed; `exit_code` None when it did not finish (deadline, stop, or
        the container died)."""
    @abstractmethod
    def attach(self, container: str, command: list[str], env: dict[str, str] | None = None,
               workdir: str | None = None, user: str | None = None) -> Attached:
        """Start a command with its stdin and stdout attached to the caller (`Attached`)."""
    @abstractmethod
    def spawn(self, container: str, command: list[str], env: dict[str, str] | None = None,
              workdir: str | None = None, user: str | None = None) -> str:
        """Start a command in the background; `spawned_exit_code` reads how it ended."""
    @abstractmethod
    def spawned_exit_code(self, exec_id: str) -> int | None:
        """The exit code of a spawned command; None while it runs (or if unknown)."""
    @abstractmethod
    def wait(self, container: str, timeout_sec: float) -> int | None: ...
    @abstractmethod
    def put_archive(self, container: str, path: str, tar_bytes: bytes | BinaryIO) -> None: ...
    @abstractmethod
    def get_archive(self, container: str, path: str) -> Generator[bytes, None, None] | None:
        """A tar stream of `path`, or None if it does not exist; close it if not read out."""
    @abstractmethod
    def limits(self, container: str) -> ContainerLimits: ...
    @abstractmethod
    def health(self, container: str) -> tuple[str, str | None]: ...
    @abstractmethod
    def is_running(self, container: str) -> bool: ...
    @abstractmethod
    def oom_kills(self, container: str) -> int: ...
    @abstractmethod
    def kill(self, container: str) -> None: ...
    @abstractmethod
    def remove(self, container: str) -> None: ...
    @abstractmethod
    def writable_layer_bytes(self, job: str) -> dict[str, int]: ...

    # ---- what orchestra made (cleanup) ---------------------------------------------
    @abstractmethod
    def labelled(self, *labels: str) -> tuple[list[str], list[str], list[str]]: ...
    @abstractmethod
    def owned_objects(self) -> list[dict]: ...
