"""The Docker engine backend, on docker-py's low-level client (client.py; DESIGN 7: no
subprocess per step): the local socket, tcp:// with TLS, ssh://, a Docker context or
Podman's compatible socket.

Containers are created and started, never `run()` (which auto-pulls). Every object made
here carries orchestra's labels, so `cleanup` and the reaper find them. docker-py's errors
never leave this module: every public method turns them into RuntimeFault (the engine
failed: infrastructure) or BuildFailed (the task's image cannot be had).
"""

from __future__ import annotations

import fcntl
import functools
import os
import resource
import socket
import struct
import threading
import time
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from typing import BinaryIO, ParamSpec, TypeVar

from orchestrator.errors import InfraError
from orchestrator.log import get_logger
from orchestrator.paths import LOCK_DIR
from orchestrator.runtime import firewall
from orchestrator.runtime.base import (
    LABEL_JOB,
    LABEL_PID,
    TRIMMED_CAPABILITIES,
    BuildFailed,
    Capabilities,
    ContainerLimits,
    EngineFacts,
    ExecResult,
    ImageFacts,
    Network,
    Runtime,
    RuntimeFault,
    SandboxSpec,
)
from orchestrator.runtime.client import (
    BROKEN_STREAM,
    TRANSPORT_ERRORS,
    APIError,
    DockerException,
    EngineClient,
    ImageNotFound,
    NotFound,
)
from orchestrator.runtime.disk import LoopDisks, loop_disks_available
from orchestrator.runtime.subnets import Block, SubnetPool, host_routes

__all__ = ["BuildFailed", "DockerRuntime", "RuntimeFault", "connect"]

log = get_logger()
POLL_SEC = 0.25  # how often a waiting exec checks its deadline and stop event
# Under gVisor the container's pids cgroup counts the sandbox's own host threads (its kernel
# and file proxy: 39-42 idle here, more per mount) and, with the ptrace platform, about 7 per
# process inside: `pids_limit = 64` in the cgroup killed the sandbox before the agent ran
# (exit 2). So under gVisor the task's limit goes to gVisor's kernel as RLIMIT_NPROC, which
# it enforces per sandbox, for root too (fork fails with EAGAIN at the limit, as the cgroup
# makes it under runc), and the cgroup keeps a backstop sized for the sandbox's threads.
GVISOR_PIDS_BASE = 128
GVISOR_PIDS_PER_PROCESS = 16
SUBNET_LOCK = LOCK_DIR / "subnets.lock"
P = ParamSpec("P")
R = TypeVar("R")


def connect(max_pool_size: int = 16) -> EngineClient:
    try:
        return EngineClient(timeout=120, max_pool_size=max_pool_size)
    except (OSError, DockerException, ValueError) as exc:
        raise InfraError(
            f"Docker engine unreachable ({exc.__class__.__name__}: {exc}). "
            "Start dockerd (or run `make docker`) and retry."
        ) from exc




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
    return call


class DockerRuntime(Runtime):
    def __init_subclass__(cls, **kwargs: object) -> None:  # a subclass's methods meet the seam too
        super().__init_subclass__(**kwargs)
        _wrap_public(cls)

    def __init__(self, engine: EngineClient | None = None, max_pool_size: int = 16):
        self.api = engine or connect(max_pool_size)  # the Engine API client: tests read back from it
        self.subnets = SubnetPool()
        self._network_blocks: dict[str, Block] = {}
        self._runtime_paths: dict[str, str] | None = None  # OCI runtime name -> its binary
        self._lock = threading.Lock()
        # Podman's Docker-compatible API, where some calls differ (README "Engines")
        self.podman = any("podman" in name.lower() for name in getattr(self.api, "components", []))
        self.volume_copy_up = not self.podman
        # facts of this process and its engine's address, read once (every trial asks)
        self.local_engine = _is_local(self.api.base_url)
        self._loop_disks = LoopDisks() if self.local_engine and loop_disks_available() else None

    def engine_facts(self) -> EngineFacts:
        info = self.api.info()
        return EngineFacts(cpus=float(info.get("NCPU") or 1),
                           memory_mb=int((info.get("MemTotal") or 2**31) // 2**20),
                           oci_runtimes=sorted(info.get("Runtimes") or {}),
                           version=str(info.get("ServerVersion") or ""),
                           kind="podman" if self.podman else "docker",
                           data_root=str(info.get("DockerRootDir") or ""))

    def data_root_space(self, facts: EngineFacts | None = None) -> tuple[int, int] | None:
        root = (facts or self.engine_facts()).data_root
        if not self.local_engine or not root:
            return None
        try:
            stat = os.statvfs(root)
        except OSError:
            return None
        return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize

    def unanswered(self, timeout_sec: float = 5.0) -> str | None:
        try:
            return None if self.api.ping(timeout=timeout_sec) else "its ping was not OK"
        except APIError as exc:  # it answers, with an error: as good as gone for a trial
            return f"it answers {exc.status_code}: {str(exc.explanation or exc)[:200]}"
        except Exception as exc:  # refused, reset, timed out: gone
            return f"{exc.__class__.__name__}: {str(exc)[:200]}"

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

    def loop_disks(self) -> LoopDisks | None:
        return self._loop_disks

    def capabilities(self, facts: EngineFacts | None = None) -> Capabilities:
        why = {}
        if not self.local_engine:
            why["disk_quota"] = why["host_isolation"] = (
                f"the engine is on another host ({self.api.base_url}): this host's loop disks "
                "and firewall do not reach its containers")
        else:
            if self._loop_disks is None:
                why["disk_quota"] = "loop disks need root, mkfs.ext4 and /dev/loop-control"
            if not firewall.available():
                why["host_isolation"] = "host isolation needs root and iptables"
        return Capabilities(
            disk_quota="watchdog" if "disk_quota" in why else "loop-volume",
            host_isolation="none" if "host_isolation" in why else "iptables",
            oci_runtimes=(facts or self.engine_facts()).oci_runtimes, local_engine=self.local_engine,
            why=why)

    # ---- images -------------------------------------------------------------------
    def image_facts(self, ref: str) -> ImageFacts:
        info = self.api.inspect_image(ref)
        config = info.get("Config") or {}
        return ImageFacts(id=info["Id"], tags=list(info.get("RepoTags") or []),
                          labels=dict(config.get("Labels") or {}), env=list(config.get("Env") or []),
                          workdir=config.get("WorkingDir") or "", size=int(info.get("Size") or 0),
                          created=_created(info.get("Created")))

    def import_image(self, tarball: str, repository: str, tag: str, changes: list[str]) -> None:
        self.api.import_image_from_file(tarball, repository=repository, tag=tag, changes=changes)

    def image_exists(self, ref: str) -> bool:
        try:
            self.api.inspect_image(ref)
            return True
        except ImageNotFound:
            return False

    def build_image(self, context_tar: bytes, tag: str, labels: dict[str, str],
                    timeout_sec: float) -> None:
        tail: list[str] = []
        started = time.monotonic()
        try:
            stream = self.api.build(context_tar, tag=tag, labels=labels,
                                    timeout=int(timeout_sec) + 30)
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

    def pull(self, ref: str, timeout_sec: float = 600) -> None:
        """Pull an image (a task's `docker_image`, or --registry's on a node); BuildFailed
        with the engine's reason when it cannot be had."""
        repository, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
        self._transfer("pull", ref, self.api.pull, repository, tag, BuildFailed)
        if not self.image_exists(ref):
            raise BuildFailed(f"pull {ref}: the engine reported no image")

    def push(self, ref: str, timeout_sec: float = 600) -> None:
        repository, _, tag = ref.rpartition(":")
        self._transfer("push", ref, self.api.push, repository, tag, RuntimeFault)

    @staticmethod
    def _transfer(verb: str, ref: str, call: Callable[[str, str], Iterable[dict]],
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
        conf: dict = {"Labels": labels}
        if env is not None:
            conf["Env"] = env
        return self.api.commit(container, repository=repository, tag=tag, conf=conf)["Id"]

    def remove_image(self, ref: str) -> None:
        """Idempotent: an image already gone is success. A conflict (a child image, a
        container still using it) is not waited on: it lasts, so it is raised at once."""
        _removed("image", ref, lambda: self.api.remove_image(ref, force=True),
                 lambda: self.image_exists(ref), retry=_removal_in_progress)

    # ---- networks and volumes ----------------------------------------------------------
    def _subnets_in_use(self) -> list[str]:
        """The engine's networks' subnets, and the host's routes (Podman refuses a subnet
        any interface of the host uses, e.g. another engine's bridge)."""
        used = host_routes()
        for net in self.api.networks():
            for conf in (net.get("IPAM") or {}).get("Config") or []:
                if conf.get("Subnet") and ":" not in conf["Subnet"]:
                    used.append(conf["Subnet"])
        return used

    def create_network(self, name: str, internal: bool, labels: dict[str, str]) -> Network:
        """A bridge on a /28 that no network on the engine uses. Choosing and creating happen
        under a host-wide file lock, so orchestra processes on one engine (Ray workers, two
        jobs) never race for the same block."""
        SUBNET_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with open(SUBNET_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return self._create_network(name, internal, labels)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _create_network(self, name: str, internal: bool, labels: dict[str, str]) -> Network:
        for _ in range(5):
            block = self.subnets.acquire(self._subnets_in_use())
            gateway = str(next(block.hosts()))
            try:
                self.api.create_network(
                    name, internal=internal, labels=labels, subnet=str(block), gateway=gateway,
                    options={"com.docker.network.bridge.name": firewall.bridge_name(name)})
            except APIError as exc:
                self.subnets.release(block)
                if "overlap" in str(exc).lower() or "already used" in str(exc).lower():
                    continue  # another process took it between our list and create
                raise RuntimeFault(f"network create failed: {exc}") from exc
            with self._lock:
                self._network_blocks[name] = block
            isolated = self.local_engine and firewall.isolate(name, gateway)
            return Network(name=name, gateway=gateway, subnet=str(block), internal=internal,
                           host_isolation="iptables" if isolated else "none")
        raise RuntimeFault("network create failed: every candidate subnet overlapped")

    def remove_network(self, name: str) -> None:
        """Idempotent; waits (bounded) while containers being removed still hold it."""
        gateway = self._gateway_of(name)
        try:
            _removed("network", name, lambda: self.api.remove_network(name),
                     lambda: self._exists(self.api.inspect_network, name))
        finally:
            self._release_block(name)
        if gateway:
            firewall.release(name, gateway)

    def adopt_network(self, name: str) -> Network | None:
        try:
            info = self.api.inspect_network(name)
        except NotFound:
            return None
        config = _ipam(info)
        if not config.get("Subnet") or not config.get("Gateway"):
            return None
        if self.api.containers(all=True, filters={"network": name}):  # running, created, stopped
            return None
        isolated = self.local_engine and firewall.ensure(name, config["Gateway"])
        return Network(name=name, gateway=config["Gateway"], subnet=config["Subnet"],
                       internal=bool(info.get("Internal")),
                       host_isolation="iptables" if isolated else "none")

    def open_host_ports(self, network: Network, ports: list[int]) -> list[int] | None:
        if network.host_isolation != "iptables" or not firewall.open_ports(network.name, network.gateway, ports):
            return None
        return firewall.opened(network.name)

    def _gateway_of(self, name: str) -> str | None:
        try:
            return _ipam(self.api.inspect_network(name)).get("Gateway")
        except APIError:
            return None

    def _release_block(self, name: str) -> None:
        with self._lock:
            block = self._network_blocks.pop(name, None)
        if block is not None:
            self.subnets.release(block)

    def connect_network(self, container: str, network: str) -> None:
        self.api.connect_container_to_network(container, network)

    def connect_network_if_absent(self, container: str, network: str) -> None:
        attached = self.api.inspect_container(container)["NetworkSettings"]["Networks"] or {}
        if network not in attached:
            self.api.connect_container_to_network(container, network)

    def disconnect_network(self, container: str, network: str) -> None:
        try:
            self.api.disconnect_container_from_network(container, network, force=True)
        except NotFound:
            pass

    def create_bind_volume(self, name: str, host_path: str, labels: dict[str, str]) -> str:
        self.api.create_volume(name, driver="local", labels=labels,
                               driver_opts={"type": "none", "o": "bind", "device": host_path})
        return name

    def create_volume(self, name: str, labels: dict[str, str]) -> str:
        self.api.create_volume(name, driver="local", labels=labels)
        return name

    def health(self, container: str) -> tuple[str, str | None]:
        """(State.Status, State.Health.Status or None without a healthcheck)."""
        state = self.api.inspect_container(container)["State"]
        return state.get("Status", ""), (state.get("Health") or {}).get("Status")

    def remove_volume(self, name: str) -> None:
        """Idempotent; waits (bounded) while a container being removed still uses it."""
        _removed("volume", name, lambda: self.api.remove_volume(name, force=True),
                 lambda: self._exists(self.api.inspect_volume, name))

    # ---- containers ---------------------------------------------------------------
    def create(self, spec: SandboxSpec) -> str:
        memory = spec.memory_mb * 1024 * 1024
        host_config = {
            "NanoCpus": int(spec.cpus * 1e9), "Memory": memory, "MemorySwap": memory,
            "PidsLimit": spec.pids_limit,
            "CapDrop": ["ALL"] if spec.drop_all_capabilities else TRIMMED_CAPABILITIES,
            "SecurityOpt": ["no-new-privileges:true"], "Init": True,
            "LogConfig": {"Type": "json-file",
                          "Config": {"max-size": spec.log_max_size, "max-file": "1"}},
            "NetworkMode": spec.network,
            "Mounts": [{"Target": m.target, "Source": m.source, "Type": "volume", "ReadOnly": False}
                       for m in spec.mounts]
            + [{"Target": target, "Source": source, "Type": "bind", "ReadOnly": True}
               for source, target in spec.read_only_binds.items()],
        }
        if spec.runtime:
            host_config["Runtime"] = spec.runtime
        if spec.pids_limit and self._is_gvisor(spec.runtime):
            host_config["Ulimits"] = [{"Name": "nproc", "Soft": spec.pids_limit, "Hard": spec.pids_limit}]
            host_config["PidsLimit"] = GVISOR_PIDS_BASE + GVISOR_PIDS_PER_PROCESS * spec.pids_limit
        elif self.podman:  # its default nofile and nproc fail where the host's hard limits are lower
            # (the service's own limits are not ours to read: nproc, which pids_limit bounds
            # anyway, gets a value below common hard limits)
            host_config["Ulimits"] = [_ulimit("nofile", resource.RLIMIT_NOFILE, 1 << 20),
                                      _ulimit("nproc", resource.RLIMIT_NPROC, 16384)]
        config: dict = {"Labels": spec.labels, "Env": [f"{k}={v}" for k, v in spec.env.items()],
                        "WorkingDir": spec.workdir or "", "User": spec.user or ""}
        if spec.aliases and spec.network != "none":
            config["NetworkingConfig"] = {"EndpointsConfig": {spec.network: {"Aliases": spec.aliases}}}
        if spec.entrypoint is not None:
            config["Entrypoint"] = spec.entrypoint
        if spec.healthcheck is not None:
            probe = spec.healthcheck
            config["Healthcheck"] = {"Test": probe.test, "Interval": int(probe.interval_sec * 1e9),
                                     "Timeout": int(probe.timeout_sec * 1e9), "Retries": probe.retries,
                                     "StartPeriod": int(probe.start_period_sec * 1e9)}
        try:
            created = self.api.create_container(spec.image, command=spec.command, name=spec.name,
                                                host_config=host_config, **config)
        except ImageNotFound as exc:
            raise RuntimeFault(f"image {spec.image} not found (orchestra never pulls)") from exc
        return created["Id"]

    def start(self, container: str) -> None:
        self.api.start(container)

    def exec(self, container: str, command: list[str], *, deadline: float | None = None,
             env: dict[str, str] | None = None, workdir: str | None = None,
             user: str | None = None, stdin: bytes | None = None, capture: int = 0,
             stop: threading.Event | None = None) -> ExecResult:
        """See Runtime.exec. The exec is attached: its end is seen the moment its stream
        closes (no polling), while short socket timeouts let the deadline and `stop` be
        checked, and a process that ended while a child it left behind holds the stream is
        seen as ended (looked at every 2 s: one inspect, not a poll). Output past `capture`
        bytes is read and dropped (agent commands redirect their own output to files, so
        their stream is empty)."""
        deadline = time.time() + 60 if deadline is None else deadline
        exec_id = self.api.exec_create(container, command, environment=env or {}, workdir=workdir,
                                       user=user or "", stdin=stdin is not None)["Id"]
        raw, buffer = self.api.exec_attach(exec_id)
        output = bytearray()
        waits = 0
        try:
            raw.settimeout(max(0.05, min(POLL_SEC, deadline - time.time())))
            if stdin:
                raw.sendall(stdin)
            raw.shutdown(socket.SHUT_WR)
            while True:
                try:
                    chunk = raw.recv(65536)
                except TimeoutError:
                    if time.time() >= deadline:
                        return ExecResult(None, True, bytes(output))
                    if stop is not None and stop.is_set():
                        return ExecResult(None, False, bytes(output))
                    waits += 1
                    if waits % 8 == 0 and not self._exec_state(exec_id).get("Running"):
                        break  # it ended, but something it started still holds the stream
                    raw.settimeout(max(0.05, min(POLL_SEC, deadline - time.time())))
                    continue
                if not chunk:
                    break
                buffer = _frames(buffer + chunk, output, capture)
            _frames(buffer, output, capture)  # what came with the engine's answer, if no more did
        finally:
            raw.close()
        for _ in range(100):  # the stream closes as the process ends; its state follows
            state = self._exec_state(exec_id)
            if not state.get("Running"):
                code = state.get("ExitCode")
                if (code is None or code >= 128) and self._going_down(container):
                    return ExecResult(None, False, bytes(output))  # the container was killed
                return ExecResult(code, False, bytes(output))
            time.sleep(0.02)
        return ExecResult(None, False, bytes(output))

    def _exec_state(self, exec_id: str) -> dict:
        """The exec's state; {} once the engine has forgotten it (under gVisor an exec's
        instance goes when the watchdog kills its container: that is the container killed,
        not the engine failing)."""
        try:
            return self.api.exec_inspect(exec_id)
        except NotFound:
            return {}

    def _going_down(self, container: str, settle: float = 0.3) -> bool:
        """After an exec ended by a signal: whether its container is stopping. Under gVisor
        an agent may kill PID 1 (runc's kernel protects it); the exec then ends 0.1 s before
        the engine reports the container stopped, and test.sh must not be run in it."""
        until = time.monotonic() + settle
        while self.is_running(container):
            if time.monotonic() >= until:
                return False
            time.sleep(0.03)
        return True

    def spawn(self, container: str, command: list[str], env: dict[str, str] | None = None,
              workdir: str | None = None, user: str | None = None) -> str:
        exec_id = self.api.exec_create(container, command, environment=env or {}, workdir=workdir,
                                       user=user or "")["Id"]
        self.api.exec_start(exec_id)
        return exec_id

    def spawned_exit_code(self, exec_id: str) -> int | None:
        try:
            state = self.api.exec_inspect(exec_id)
        except APIError:
            return None
        return None if state["Running"] else state["ExitCode"]

    def oom_kills(self, container: str) -> int:
        """OOM kills in the container's memory cgroup (an exec'd process's OOM never sets
        State.OOMKilled). Read on the host when the cgroup is visible, else from inside."""
        state = self.api.inspect_container(container)
        if state["State"].get("OOMKilled"):
            return 1
        cid = state["Id"]
        for path in (f"/sys/fs/cgroup/memory/docker/{cid}/memory.oom_control",
                     f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.events",
                     f"/sys/fs/cgroup/docker/{cid}/memory.events"):
            try:
                return _oom_counter(Path(path).read_text())
            except OSError:
                continue
        if not state["State"].get("Running"):
            return 0
        outcome = self.exec(container, [
            "sh", "-c", "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || "
                        "cat /sys/fs/cgroup/memory.events 2>/dev/null"], capture=65536)
        return _oom_counter(outcome.output.decode(errors="replace"))

    def is_running(self, container: str) -> bool:
        try:
            return bool(self.api.inspect_container(container)["State"]["Running"])
        except NotFound:
            return False

    def wait(self, container: str, timeout_sec: float) -> int | None:
        """The exit code, or None when the container outlived timeout_sec."""
        try:
            return self.api.wait(container, timeout=timeout_sec)["StatusCode"]
        except OSError:  # the read timed out (TimeoutError), or the connection broke
            return None

    def put_archive(self, container: str, path: str, tar_bytes: bytes | BinaryIO) -> None:
        """Copy a tar (bytes, or a file streamed from disk) into the container at path."""
        if not self.api.put_archive(container, path, tar_bytes):
            raise RuntimeFault(f"copy into {path} failed")

    def get_archive(self, container: str, path: str) -> Generator[bytes, None, None] | None:
        """A tar stream of `path`, or None if it does not exist. Close the iterator when not
        reading it to the end: an abandoned copy holds the container and blocks its removal."""
        try:
            stream = self.api.get_archive(container, path)
        except APIError as exc:
            raise RuntimeFault(f"copy out of {path} failed: {exc}") from exc
        if stream is None:
            return None

        def chunks() -> Generator[bytes, None, None]:
            try:
                yield from stream
            finally:
                stream.close()

        return chunks()

    def limits(self, container: str) -> ContainerLimits:
        """Under gVisor `pids_limit` is the RLIMIT_NPROC its kernel enforces (see
        GVISOR_PIDS_BASE) and `host_pids_limit` the cgroup's backstop; under runc both are
        the cgroup's."""
        host = self.api.inspect_container(container).get("HostConfig") or {}
        log_config = (host.get("LogConfig") or {}).get("Config") or {}  # Podman: null
        pids = host.get("PidsLimit")
        if self._is_gvisor(host.get("Runtime")):
            pids = next((u.get("Hard") for u in host.get("Ulimits") or [] if u.get("Name") == "nproc"),
                        pids)
        return ContainerLimits(
            nano_cpus=host.get("NanoCpus"), memory_bytes=host.get("Memory"),
            memswap_bytes=host.get("MemorySwap"), pids_limit=pids,
            host_pids_limit=host.get("PidsLimit"),
            cap_drop=list(host.get("CapDrop") or []), cap_add=list(host.get("CapAdd") or []),
            security_opt=list(host.get("SecurityOpt") or []), init=host.get("Init"),
            network=host.get("NetworkMode"), log_max_size=log_config.get("max-size"),
            oci_runtime=host.get("Runtime"))

    def kill(self, container: str) -> None:
        try:
            self.api.kill(container)
        except APIError:
            pass  # not running, or already gone

    def remove(self, container: str) -> None:
        """Idempotent: "no such container" and "removal already in progress" are success;
        a remover that loses a race waits (bounded) until the container is gone."""
        _removed("container", container,
                 lambda: self.api.remove_container(container, force=True, v=False),
                 lambda: self._exists(self.api.inspect_container, container))

    @staticmethod
    def _exists(inspect: Callable[[str], object], name: str) -> bool:
        try:
            inspect(name)
            return True
        except NotFound:
            return False

    def writable_layer_bytes(self, job: str) -> dict[str, int]:
        rows = self.api.containers(filters={"label": f"{LABEL_JOB}={job}", "status": "running"},
                                   size=True)
        return {row["Id"]: int(row.get("SizeRw") or 0) for row in rows}

    # ---- cleanup --------------------------------------------------------------------
    def labelled(self, *labels: str) -> tuple[list[str], list[str], list[str]]:
        """Containers, networks and volumes orchestra created (they carry orchestra.pid, which
        no image has, so nothing merely inherits it) that also carry every label given."""
        filters = {"label": [*labels, LABEL_PID]}
        containers = [c["Id"] for c in self.api.containers(all=True, filters=filters)]
        networks = [n["Name"] for n in self.api.networks(filters=filters)]
        volumes = [v["Name"] for v in (self.api.volumes(filters=filters).get("Volumes") or [])]
        return containers, networks, volumes

    def owned_objects(self) -> list[dict]:
        """Every container, network and volume orchestra created: kind, name, labels."""
        rows = [{"kind": "container", "name": c["Id"], "labels": c.get("Labels") or {}}
                for c in self.api.containers(all=True, filters={"label": LABEL_PID})]
        rows += [{"kind": "network", "name": n["Name"], "labels": n.get("Labels") or {}}
                 for n in self.api.networks(filters={"label": LABEL_PID})]
        rows += [{"kind": "volume", "name": v["Name"], "labels": v.get("Labels") or {}}
                 for v in self.api.volumes(filters={"label": LABEL_PID}).get("Volumes") or []]
        return rows

    def images_labelled(self, label: str) -> list[ImageFacts]:
        return [ImageFacts(id=row["Id"], tags=list(row.get("RepoTags") or []),
                           labels=dict(row.get("Labels") or {}), size=int(row.get("Size") or 0),
                           created=_created(row.get("Created")))
                for row in self.api.images(filters={"label": label})]


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


def _created(value: object) -> float:
    """An image's creation time: seconds (the list) or an RFC 3339 string (inspect)."""
    if isinstance(value, (int, float)):
        return float(value)
    try:
        import datetime as dt

        return dt.datetime.fromisoformat(str(value)[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return 0.0


def _ulimit(name: str, which: int, ceiling: int) -> dict:
    """A ulimit at this process's hard limit, at most `ceiling`."""
    hard = resource.getrlimit(which)[1]
    limit = min(hard if hard != resource.RLIM_INFINITY else ceiling, ceiling)
    return {"Name": name, "Soft": limit, "Hard": limit}


def _oom_counter(text: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def _frames(buffer: bytes, output: bytearray, capture: int) -> bytes:
    """Move the complete frames of docker's multiplexed stream (8-byte header: stream, 0, 0,
    0, big-endian size) into `output`, up to `capture` bytes; return the incomplete rest."""
    while len(buffer) >= 8:
        size = struct.unpack(">I", buffer[4:8])[0]
        if len(buffer) < 8 + size:
            break
        if len(output) < capture:
            output += buffer[8:8 + size][:capture - len(output)]
        buffer = buffer[8 + size:]
    return buffer


def _ipam(network: dict) -> dict:
    """A network's address block (Subnet, Gateway) from its inspect, {} if it has none."""
    configs = (network.get("IPAM") or {}).get("Config") or []
    return next((c for c in configs if c.get("Gateway")), {})


def _is_local(base_url: str) -> bool:
    """The engine shares this host: its socket is here, or its TCP address is loopback."""
    scheme, _, rest = base_url.partition("://")
    host = rest.rsplit("@", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return scheme in ("unix", "npipe", "") or (scheme in ("tcp", "http", "https")
                                               and host in ("localhost", "127.0.0.1", "::1"))


def _wrap_public(cls: type) -> None:
    for name, value in list(vars(cls).items()):
        if not name.startswith("_") and callable(value) and not isinstance(value, (staticmethod, classmethod, type)):
            setattr(cls, name, _at_the_seam(value))


_wrap_public(DockerRuntime)
