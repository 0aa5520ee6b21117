"""The runtime seam: what orchestra's phases need from a container engine.

`Runtime` has a core of 20 abstract operations every runtime implements (the engine's
facts, images, the trial's network, containers, exec, archives, what orchestra made) and
optional parts (`Part`) that only some runtimes have: a runtime declares the parts it has
in `Capabilities.parts`, the job's pre-flight refuses what a job needs and the runtime
lacks before any spend, and the base class's method of a part it lacks raises
`NotSupported`. Each method's docstring is its contract: arguments, what it returns, what
it raises (orchestra's exception tree, errors.py: `RuntimeFault` when the engine fails,
`BuildFailed` when the task's image cannot be had) and its limits.

The values the seam passes (a container's spec, a network, facts, an exec's end) are in
values.py, named here too for callers.

Where trials run (threads on this host, or Ray nodes) is the executor's business
(orchestrator/executors); each node runs trials against its own Runtime.
"""

from __future__ import annotations

import enum
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import BinaryIO, NoReturn

# The seam's faults are the kernel's (errors.py draws the tree), named here for its callers.
from orchestrator.errors import BuildFailed as BuildFailed
from orchestrator.errors import NotSupported as NotSupported
from orchestrator.errors import RuntimeFault as RuntimeFault

# The values it passes (runtime/values.py), named here for its callers.
from orchestrator.runtime.values import LABEL_IMAGE_KIND as LABEL_IMAGE_KIND
from orchestrator.runtime.values import LABEL_JOB as LABEL_JOB
from orchestrator.runtime.values import LABEL_KIND as LABEL_KIND
from orchestrator.runtime.values import LABEL_PID as LABEL_PID
from orchestrator.runtime.values import LABEL_TRIAL as LABEL_TRIAL
from orchestrator.runtime.values import TRIMMED_CAPABILITIES as TRIMMED_CAPABILITIES
from orchestrator.runtime.values import ContainerLimits as ContainerLimits
from orchestrator.runtime.values import ContainerSpec as ContainerSpec
from orchestrator.runtime.values import EngineFacts as EngineFacts
from orchestrator.runtime.values import ExecResult as ExecResult
from orchestrator.runtime.values import HealthProbe as HealthProbe
from orchestrator.runtime.values import ImageFacts as ImageFacts
from orchestrator.runtime.values import LoopDisk as LoopDisk
from orchestrator.runtime.values import Network as Network
from orchestrator.runtime.values import OwnedObject as OwnedObject
from orchestrator.runtime.values import PulledImage as PulledImage
from orchestrator.runtime.values import PullFailed as PullFailed
from orchestrator.runtime.values import VolumeMount as VolumeMount


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


class Part(enum.StrEnum):
    """An optional part of a runtime: methods only some runtimes can do. A runtime lists
    the parts it has in `Capabilities.parts`; the base class's methods of a part raise
    `NotSupported` (listings of a part return nothing, removals of what the runtime can
    never have made succeed). Which methods each part holds: `PART_METHODS`."""

    REGISTRY = "registry"  # pull, push, registry_refusal, tag_image (--registry, FROM bases)
    IMPORT = "import"  # import_image (a root filesystem as an image: the offline bases)
    COMMIT = "commit"  # commit (the snapshot verifier mode)
    NETWORK_SWITCH = "network-switch"  # connect/disconnect a container (the verifier's policy)
    VOLUMES = "volumes"  # create_volume, create_bind_volume (loop disks, compose volumes)
    ATTACH = "attach"  # attach (a duplex stream: ACP agents)
    SPAWN = "spawn"  # spawn, spawned_exit_code (background commands: workers)
    HEALTH = "health"  # health (compose services' healthchecks)
    LAYER_SIZES = "layer-sizes"  # writable_layer_bytes (the disk watchdog)
    LISTING = "listing"  # images_labelled, image_tree, owned_objects (pruning, the reaper by owner)


PART_METHODS: dict[Part, tuple[str, ...]] = {
    Part.REGISTRY: ("pull", "push", "registry_refusal", "tag_image"),
    Part.IMPORT: ("import_image",),
    Part.COMMIT: ("commit",),
    Part.NETWORK_SWITCH: ("connect_network", "connect_network_if_absent", "disconnect_network"),
    Part.VOLUMES: ("create_volume", "create_bind_volume"),
    Part.ATTACH: ("attach",),
    Part.SPAWN: ("spawn", "spawned_exit_code"),
    Part.HEALTH: ("health",),
    Part.LAYER_SIZES: ("writable_layer_bytes",),
    Part.LISTING: ("images_labelled", "image_tree", "owned_objects"),
}


@dataclass
class Capabilities:
    """What this runtime can enforce and which optional parts it has, declared before any
    spend: the job's pre-flight reads it (a job that needs what is missing stops with exit
    2; a weaker enforcement is said once, before the first trial) and the job's result
    records it."""

    disk_quota: str  # "loop-volume": ENOSPC at the quota, plus the watchdog; "watchdog" alone
    host_isolation: str  # "iptables": a trial's network reaches only its own ports here; "none"
    oci_runtimes: list[str]
    local_engine: bool  # the engine shares this host (its bind mounts and cgroups are ours)
    registry_push: bool = True  # `--registry` can push (registry_refusal checks a registry)
    why: dict[str, str] = field(default_factory=dict)  # per capability not held: the reason
    parts: frozenset[Part] = frozenset(Part)  # the optional parts it has (Part)


class Attached(ABC):
    """A command running with its stdin and stdout attached (`Runtime.attach`, Part.ATTACH): a duplex
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
    the watchdog) may ask of a container engine: 20 abstract core operations, each with its
    contract, and the optional parts (`Part`) as concrete methods that raise `NotSupported`
    until a runtime that has the part overrides them. `DockerRuntime` (docker/) and
    `FakeRuntime` (fake.py, in memory) implement it; one contract suite runs against both
    (tests/contract/runtime_contract.py).

    Errors, for every method: the engine failing (an API error, a lost connection) raises
    `RuntimeFault`, and nothing else of the runtime's client leaves it; a task's image that
    cannot be had raises `BuildFailed`. Removals are idempotent: what is already gone is
    success. A container is named by the id `create` returned (Docker also takes its name).
    Times are seconds; a `deadline` is a time.time() value."""

    # An empty named volume is filled with what the image has at its mount point (Docker);
    # where not (Podman), orchestra does not put a volume over the workdir.
    volume_copy_up: bool = True

    # ---- the engine (core) ------------------------------------------------------------
    @abstractmethod
    def engine_facts(self) -> EngineFacts:
        """What the engine says about itself: CPUs and memory it can give containers, the
        OCI runtimes it can start them under, its kind and version, its data root, and an
        `engine_id` no other engine this host reaches has (stable while the engine lives).

        Raises: RuntimeFault when the engine does not answer or fails."""
    @abstractmethod
    def capabilities(self, facts: EngineFacts | None = None) -> Capabilities:
        """What it can enforce (disk quota, host isolation, OCI runtimes) with the reason
        for each it cannot, and the optional parts it has (`Capabilities.parts`). Read by
        the job's pre-flight before any spend.

        Args: facts: engine_facts(), when the caller has them (one engine call fewer).
        Raises: RuntimeFault when the engine fails."""

    # ---- images (core) ---------------------------------------------------------------
    @abstractmethod
    def image_exists(self, ref: str) -> bool:
        """Whether the engine holds image `ref` (a name:tag, or an id) locally; never pulls.

        Raises: RuntimeFault when the engine fails (an absent image is False, not an error)."""
    @abstractmethod
    def image_facts(self, ref: str) -> ImageFacts:
        """A local image's id, tags, labels, environment, working directory, size, layers.

        Raises: RuntimeFault when the image is absent (ask image_exists first) or the
        engine fails."""
    @abstractmethod
    def build_image(self, context_tar: bytes | BinaryIO, tag: str, labels: dict[str, str],
                    timeout_sec: float) -> None:
        """Build the Dockerfile at the root of a tar build context and tag it.

        Args: context_tar: the context (bytes, or a file streamed from disk); labels: set
        on the image; timeout_sec: the build's own limit.
        Raises: BuildFailed (with the log's last lines) when the Dockerfile fails, the
        engine refuses the context, or the build runs past timeout_sec; RuntimeFault when
        the engine or its connection fails."""
    @abstractmethod
    def remove_image(self, ref: str) -> None:
        """Remove a local image (its tag, and its layers where nothing else uses them).

        Idempotent: an absent image is success. Raises: RuntimeFault when it cannot be
        removed (a container still uses it) or the engine fails."""

    # ---- the trial's network (core) ----------------------------------------------------
    @abstractmethod
    def create_network(self, name: str, internal: bool, labels: dict[str, str]) -> Network:
        """A new network for one trial's containers (`ContainerSpec.network`), labelled.

        Returns the `Network`, whose `gateway` is where its containers reach this host and
        where the trial's host services listen (see Network): the topology is the
        runtime's to say, not an assumption about Docker's bridge. internal: no route out
        but the host's services on the gateway.
        Raises: RuntimeFault when it cannot be made (the name is taken, no address block
        is free) or the engine fails."""
    @abstractmethod
    def remove_network(self, name: str) -> None:
        """Remove a network (and any host rules the runtime made for it).

        Idempotent: an absent network is success; one still held by containers being
        removed is waited for (bounded). Raises: RuntimeFault past that wait."""

    # ---- containers (core) -----------------------------------------------------------
    @abstractmethod
    def create(self, spec: ContainerSpec) -> str:
        """Create (not start) a container from a local image, with the spec's quotas
        (CPUs, memory with no swap, pids), capabilities, labels, mounts and network applied
        as given; never pulls. Returns its id.

        Raises: RuntimeFault when the image is absent or the engine refuses or fails;
        RuntimeMissing when the engine has no OCI runtime `spec.runtime`."""
    @abstractmethod
    def start(self, container: str) -> None:
        """Start a created container (its command, or the image's).

        Raises: RuntimeFault when it is absent or does not start."""
    @abstractmethod
    def exec(self, container: str, command: list[str], *, deadline: float | None = None,
             env: dict[str, str] | None = None, workdir: str | None = None,
             user: str | None = None, stdin: bytes | None = None, capture: int = 0,
             stop: threading.Event | None = None) -> ExecResult:
        """Run a command in a running container and wait for it.

        Args: deadline: time.time() by which it must end (default: 60 s from now);
        stdin: fed to it, then closed; capture: keep at most this many bytes of its output
        (stdout and stderr together), the rest read and dropped; 0: output is not kept at
        all (agent commands write their own logs, so a flood lands on the trial's disk, not
        here); stop: set by another thread to stop waiting.
        Returns: `ExecResult`: timed_out when the deadline passed first; exit_code None
        when it did not finish (deadline, stop, or the container killed under it), else its
        status (137: killed by SIGKILL, the OOM killer included: see oom_kills).
        Raises: RuntimeFault when the container is absent or not running, or the engine
        fails. A command that does not exist is exit code 126 or 127, not an error."""
    @abstractmethod
    def wait(self, container: str, timeout_sec: float) -> int | None:
        """Wait for a container's main process to end: its exit code, or None when it
        outlived timeout_sec (or the wait was cut off).

        Raises: RuntimeFault when the container is absent or the engine fails."""
    @abstractmethod
    def put_archive(self, container: str, path: str, tar_bytes: bytes | BinaryIO) -> None:
        """Unpack a tar (bytes, or a file streamed from disk) into the container at `path`,
        an existing directory; owners and modes as the tar says. Works on a stopped
        container too.

        Raises: RuntimeFault when the container or `path` is absent, or the copy fails."""
    @abstractmethod
    def get_archive(self, container: str, path: str) -> Generator[bytes, None, None] | None:
        """A tar stream of `path` (a file or a directory, named by its last component), or
        None if the path or the container does not exist. Close the generator when not
        reading it to the end: an abandoned copy can hold the container.

        Raises: RuntimeFault when the engine fails (also while the stream is read)."""
    @abstractmethod
    def limits(self, container: str) -> ContainerLimits:
        """The quotas the container really got, read back (not the spec's): nano_cpus =
        cpus x 10^9, memory_bytes = memswap_bytes = memory_mb MiB, pids_limit, dropped
        capabilities, network, log size, OCI runtime.

        Raises: RuntimeFault when the container is absent or the engine fails."""
    @abstractmethod
    def is_running(self, container: str) -> bool:
        """Whether the container runs now; False when it is absent.

        Raises: RuntimeFault when the engine fails."""
    @abstractmethod
    def oom_kills(self, container: str) -> int:
        """How many processes the OOM killer killed in the container's memory limit (an
        exec'd process killed for memory counts, though its container lives on).

        Raises: RuntimeFault when the container is absent or the engine fails."""
    @abstractmethod
    def kill(self, container: str) -> None:
        """SIGKILL the container's processes; it stops (and stays, until removed).

        Never raises for a container that is not running or is absent."""
    @abstractmethod
    def remove(self, container: str) -> None:
        """Remove a container, killing it first if it runs.

        Idempotent: absent, or being removed by another caller, is success (waited for,
        bounded). Raises: RuntimeFault past that wait or when the engine fails."""

    # ---- what orchestra made (core) ------------------------------------------------------
    @abstractmethod
    def labelled(self, *labels: str) -> tuple[list[str], list[str], list[str]]:
        """(containers, networks, volumes) orchestra created (they carry LABEL_PID, which
        no image has, so nothing merely inherits it) that also carry every label given
        ("key" or "key=value"). A runtime without volumes lists none.

        Raises: RuntimeFault when the engine fails."""

    # ---- optional, with a default every runtime can live with -------------------------
    def unanswered(self, timeout_sec: float = 5.0) -> str | None:
        """None when the engine answers within timeout_sec, else why not. Never raises: the
        job's engine watch asks it while the engine may be gone. The default asks
        engine_facts() (without its own timeout: a runtime that can hang overrides this)."""
        try:
            self.engine_facts()
        except Exception as exc:
            return f"{exc.__class__.__name__}: {str(exc)[:200]}"
        return None

    def data_root_space(self, facts: EngineFacts | None = None) -> tuple[int, int] | None:
        """(free, total) bytes of the filesystem under the engine's data root; None where it
        cannot be read from here (the default: an engine on another host, or one that keeps
        nothing on a disk). Raises: RuntimeFault when the engine fails."""
        return None

    def loop_disks(self) -> DiskQuotas | None:
        """Per-trial disk quotas on this host; None (the default) where the runtime cannot
        use them (not root, no mkfs.ext4 or loop devices, an engine on another host).
        Capabilities.disk_quota says which."""
        return None

    def open_host_ports(self, network: Network, ports: list[int]) -> list[int] | None:
        """Exactly `ports` of the network's gateway open to its containers (the trial's own
        relay and proxies), the rest of the host refused; returns the open ports read back,
        or None (the default) where the runtime cannot isolate the host.
        Raises: RuntimeFault when the host's rules cannot be written."""
        return None

    def adopt_network(self, name: str) -> Network | None:
        """A network made earlier (by this or another process) for reuse, with its host
        isolation re-checked; None if it is gone, any container (running or not) is on it,
        or (the default) the runtime does not reuse networks. Raises: RuntimeFault."""
        return None

    def remove_volume(self, name: str) -> None:
        """Remove a volume. Idempotent: an absent one is success; one a container being
        removed still uses is waited for (bounded). A runtime without Part.VOLUMES never
        made one: success. Raises: RuntimeFault past the wait."""
        return None

    # ---- optional parts: NotSupported unless the runtime has the part ----------------
    def _lacks(self, part: Part, method: str) -> NoReturn:
        raise NotSupported(str(part), method, type(self).__name__)

    # Part.REGISTRY
    def pull(self, ref: str, timeout_sec: float = 600) -> PulledImage:
        """`ref` from its registry as the engine pulls it (its registry mirrors, the Docker
        config's credentials). Raises: PullFailed (a BuildFailed) with the registry's reason
        when it brings none, `unreachable` when no registry answered; RuntimeFault when the
        engine fails; NotSupported without Part.REGISTRY."""
        self._lacks(Part.REGISTRY, "pull")

    def push(self, ref: str, timeout_sec: float = 600) -> None:
        """A local image to its registry (`--registry`), with the Docker config's
        credentials. Raises: RuntimeFault with the registry's reason; NotSupported without
        Part.REGISTRY."""
        self._lacks(Part.REGISTRY, "push")

    def registry_refusal(self, registry: str) -> str | None:
        """Pre-flight for `--registry`: None when the registry accepts the credentials the
        Docker config holds for it (or none are configured: the push will tell), else its
        reason. Never raises: without Part.REGISTRY the reason is that this runtime has no
        registry part."""
        return f"the {type(self).__name__} runtime cannot push to a registry (no 'registry' part)"

    def tag_image(self, source: str, target: str) -> None:
        """Give local image `source` the name `target` (repository:tag). Raises:
        RuntimeFault when `source` is absent; NotSupported without Part.REGISTRY."""
        self._lacks(Part.REGISTRY, "tag_image")

    # Part.IMPORT
    def import_image(self, tarball: str, repository: str, tag: str, changes: list[str]) -> None:
        """A root filesystem tarball (a path on this host) as the image repository:tag, with
        Dockerfile `changes` (ENV, CMD...) applied: the offline bases. Raises: RuntimeFault;
        NotSupported without Part.IMPORT."""
        self._lacks(Part.IMPORT, "import_image")

    # Part.COMMIT
    def commit(self, container: str, repository: str, tag: str, labels: dict[str, str],
               env: list[str] | None = None) -> str:
        """Snapshot a container's filesystem as image repository:tag (the snapshot verifier
        mode); `env` replaces its environment in the image, so secrets given to the agent
        never reach a verifier started from it. Returns the image id. Raises: RuntimeFault;
        NotSupported without Part.COMMIT."""
        self._lacks(Part.COMMIT, "commit")

    # Part.NETWORK_SWITCH
    def connect_network(self, container: str, network: str) -> None:
        """Attach a container (running or not) to one more network. Raises: RuntimeFault;
        NotSupported without Part.NETWORK_SWITCH."""
        self._lacks(Part.NETWORK_SWITCH, "connect_network")

    def connect_network_if_absent(self, container: str, network: str) -> None:
        """connect_network unless it is attached already. Raises: RuntimeFault;
        NotSupported without Part.NETWORK_SWITCH."""
        self._lacks(Part.NETWORK_SWITCH, "connect_network_if_absent")

    def disconnect_network(self, container: str, network: str) -> None:
        """Detach a container from a network; not attached is success. Raises:
        RuntimeFault; NotSupported without Part.NETWORK_SWITCH."""
        self._lacks(Part.NETWORK_SWITCH, "disconnect_network")

    # Part.VOLUMES
    def create_volume(self, name: str, labels: dict[str, str]) -> str:
        """A new empty named volume (for ContainerSpec.mounts); returns its name. Raises:
        RuntimeFault; NotSupported without Part.VOLUMES."""
        self._lacks(Part.VOLUMES, "create_volume")

    def create_bind_volume(self, name: str, host_path: str, labels: dict[str, str]) -> str:
        """A named volume over a folder of this host (a loop disk's); returns its name.
        Raises: RuntimeFault; NotSupported without Part.VOLUMES."""
        self._lacks(Part.VOLUMES, "create_bind_volume")

    # Part.ATTACH
    def attach(self, container: str, command: list[str], env: dict[str, str] | None = None,
               workdir: str | None = None, user: str | None = None) -> Attached:
        """Start a command with its stdin and stdout attached to the caller (`Attached`).
        Raises: RuntimeFault; NotSupported without Part.ATTACH."""
        self._lacks(Part.ATTACH, "attach")

    # Part.SPAWN
    def spawn(self, container: str, command: list[str], env: dict[str, str] | None = None,
              workdir: str | None = None, user: str | None = None) -> str:
        """Start a command in the background; returns an id for `spawned_exit_code`.
        Raises: RuntimeFault; NotSupported without Part.SPAWN."""
        self._lacks(Part.SPAWN, "spawn")

    def spawned_exit_code(self, exec_id: str) -> int | None:
        """The exit code of a spawned command; None while it runs (or if unknown). Raises:
        NotSupported without Part.SPAWN."""
        self._lacks(Part.SPAWN, "spawned_exit_code")

    # Part.HEALTH
    def health(self, container: str) -> tuple[str, str | None]:
        """(its state: created, running, exited...; its healthcheck's status, or None
        without one). Raises: RuntimeFault; NotSupported without Part.HEALTH."""
        self._lacks(Part.HEALTH, "health")

    # Part.LAYER_SIZES
    def writable_layer_bytes(self, job: str) -> dict[str, int]:
        """Bytes written to each running container of `job` outside its volumes (container
        id -> bytes): the disk watchdog's reading. Raises: RuntimeFault; NotSupported
        without Part.LAYER_SIZES."""
        self._lacks(Part.LAYER_SIZES, "writable_layer_bytes")

    # Part.LISTING
    def images_labelled(self, label: str) -> list[ImageFacts]:
        """Local images carrying `label` ("key" or "key=value"). Raises: RuntimeFault;
        NotSupported without Part.LISTING."""
        self._lacks(Part.LISTING, "images_labelled")

    def image_tree(self) -> dict[str, tuple[str, int]]:
        """Every local image, a build's intermediate steps included: id -> (the id it was
        built on, "" for none; its size in bytes, what it was built on included). What
        pruning frees is told from it: a layer shared by many images is on disk once.
        Raises: RuntimeFault; NotSupported without Part.LISTING."""
        self._lacks(Part.LISTING, "image_tree")

    def owned_objects(self) -> list[OwnedObject]:
        """Every container, network and volume orchestra created (LABEL_PID): the reaper's
        by-owner view. Raises: RuntimeFault;
        NotSupported without Part.LISTING."""
        self._lacks(Part.LISTING, "owned_objects")
