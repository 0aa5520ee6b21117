"""The trial sandbox: network, disk quota and agent container, made and unmade together.

lifecycle.py asks for a sandbox and gets one whose limits are applied and read back; this
module owns the order of creation and the reverse order of removal (also on error).
"""

from __future__ import annotations

import enum
import os
import shutil
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from orchestrator.archive import tar_files
from orchestrator.host import NetworkPool, owner_labels
from orchestrator.log import get_logger
from orchestrator.models import AppliedLimits, CollectedPath, Healthcheck
from orchestrator.paths import (
    AGENT_LOGS,
    AGENT_STACK,
    AGENT_STACK_SOURCE,
    ARTIFACTS,
    LOGS,
    VERIFIER_LOGS,
)
from orchestrator.runtime import (
    LABEL_JOB,
    LABEL_KIND,
    LABEL_TRIAL,
    ContainerSpec,
    DiskQuotas,
    HealthProbe,
    LoopDisk,
    Network,
    Runtime,
    RuntimeFault,
    VolumeMount,
)
from orchestrator.tasks import Task
from orchestrator.trial import verifier_tools
from orchestrator.trial.sidecars import start_sidecars, volume_mounts, wait_for
from orchestrator.trial.trust import APPEND, Trust

if TYPE_CHECKING:
    from orchestrator.services import EgressProxy

log = get_logger()
SECRET_VARS = {"ORCHESTRA_PRIVATE_KEY", "ORCHESTRA_AUTH_TAG", "ORCHESTRA_MODEL_TOKEN", "OPENAI_API_KEY"}


@dataclass
class Sandbox:
    trial_id: str
    job: str
    workdir: str
    network: Network | None = None
    loop_disk: LoopDisk | None = None
    disks: DiskQuotas | None = None  # the runtime's, which made loop_disk
    volumes: list[VolumeMount] = field(default_factory=list)
    static_tools: bool = False  # the verifier's static tools are mounted (verifier_tools)
    egress: EgressProxy | None = None  # the trial's way out under an allowlist
    host_ports: list[int] | None = None  # its gateway's ports open to it (None: no firewall)
    oci_runtime: str | None = None  # every container of the trial runs under it (e.g. runsc)
    runtimes: dict[str, str] = field(default_factory=dict)  # role -> OCI runtime, read back
    allowed_hosts: dict[str, list[str]] = field(default_factory=dict)  # phase -> allowlist
    named_volumes: list[str] = field(default_factory=list)  # compose volumes
    sidecars: dict[str, str] = field(default_factory=dict)  # compose service -> container
    containers: list[str] = field(default_factory=list)
    on_disk: list[str] = field(default_factory=list)  # containers with the loop disk at /logs
    images: list[str] = field(default_factory=list)
    agent_container: str | None = None
    storage_enforcement: str = "watchdog"
    networks: NetworkPool | None = None
    name: str = ""
    extra_networks: list[Network] = field(default_factory=list)  # e.g. a public one to grade
    collected: dict[str, CollectedPath] = field(default_factory=dict)  # what collect() copied out, per path
    exec_env: dict[str, str] = field(default_factory=dict)  # secrets, for the agent's execs only
    # wiring variables the task image's own ENV sets: unset for the agent unless orchestra sets them
    image_wiring: list[str] = field(default_factory=list)
    trust: Trust = field(default_factory=Trust)  # --ca-bundle, in every container (trust.py)

    @property
    def agent(self) -> str:
        """The agent container: every sandbox open_sandbox() returns has one."""
        assert self.agent_container is not None, "the sandbox has no agent container yet"
        return self.agent_container

    def labels(self, kind: str) -> dict[str, str]:
        return {LABEL_JOB: self.job, LABEL_TRIAL: self.trial_id, LABEL_KIND: kind,
                **owner_labels()}

    def container(self, kind: ContainerKind, quotas: Quotas, *, image: str, name: str,
                  command: list[str] | None, network: str, workdir: str | None = None,
                  env: dict[str, str] | None = None, user: str | None = None,
                  drop_all_capabilities: bool = False, mounts: list[VolumeMount] | None = None,
                  binds: dict[str, str] | None = None, aliases: list[str] | None = None,
                  healthcheck: HealthProbe | None = None,
                  entrypoint: list[str] | None = None) -> ContainerSpec:
        """One of the trial's containers, the one way they are made: orchestra's labels (job,
        trial, kind, owner: what reap and the viewer find), the quotas given (the task's, or
        [verifier.environment]'s), the trial's OCI runtime and the trust bundle (CA file and
        variables, trust.py) are applied here, so no kind of container can miss one.

        Args:
            kind: the container's role (its orchestra.kind label).
            quotas: cpus, memory_mb and pids_limit, applied as given.
            user: the container's user (None: the image's); execs may name their own.
            binds: read-only host path -> container path (the bundle's are added).
        """
        return self.trust.container(ContainerSpec(
            image=image, name=name, labels=self.labels(kind), command=command, cpus=quotas.cpus,
            memory_mb=quotas.memory_mb, pids_limit=quotas.pids_limit, network=network,
            workdir=workdir, env=dict(env or {}), user=user,
            drop_all_capabilities=drop_all_capabilities, mounts=list(mounts or []),
            read_only_binds=dict(binds or {}), runtime=self.oci_runtime,
            aliases=list(aliases or []), healthcheck=healthcheck, entrypoint=entrypoint))


ContainerKind = Literal["agent", "verifier", "worker", "sidecar"]


class Quotas(Protocol):
    """What a container's quotas are read from (models.task EnvironmentSection)."""

    @property
    def cpus(self) -> float: ...
    @property
    def memory_mb(self) -> int: ...
    @property
    def pids_limit(self) -> int: ...


def resolve_workdir(runtime: Runtime, task: Task, image: str) -> str:
    configured = task.config.environment.workdir
    if configured != "/app":
        return configured
    image_dir = runtime.image_facts(image).workdir
    return image_dir if image_dir not in ("", "/") else "/app"


def open_sandbox(runtime: Runtime, networks: NetworkPool, task: Task, image: str,
                 job: str, trial_id: str, env: dict[str, str], workdir: str,
                 services: Callable[[Network], dict[str, str]] | None = None,
                 oci_runtime: str | None = None, binds: dict[str, str] | None = None,
                 trust: Trust | None = None) -> Sandbox:
    """Create network, disk and container, start it; the caller must close_sandbox().
    `binds`: host folders the agent gets read-only (an installed agent CLI).

    `services(network)` starts what listens on the network's gateway (the relay) before the
    container exists, and returns the variables that wire the agent to it."""
    box = Sandbox(trial_id=trial_id, job=job, workdir=workdir, trust=trust or Trust())
    # A fresh suffix per attempt: a retried trial never collides with what a failed one left.
    name = f"orchestra-{trial_id[:16]}-{uuid.uuid4().hex[:4]}"
    try:
        _build(runtime, networks, task, image, box, name, env, services, oci_runtime, binds or {})
    except BaseException:
        close_sandbox(runtime, box)  # a half-made sandbox is unmade here, not leaked
        raise
    return box


def _build(runtime: Runtime, networks: NetworkPool, task: Task, image: str, box: Sandbox,
           name: str, env: dict[str, str],
           services: Callable[[Network], dict[str, str]] | None, oci_runtime: str | None,
           binds: dict[str, str]) -> None:
    environment = task.config.environment
    box.name = name
    box.oci_runtime = oci_runtime
    # no-network and allowlist: no route out (an allowlist's one way out is the egress
    # proxy on this network's gateway)
    box.network = networks.acquire(internal=task.config.network_for("agent") in ("no-network", "allowlist"))
    box.networks = networks
    if services is not None:
        wired = services(box.network)
        # Secrets never enter the container's config (docker inspect, a shared-mode commit,
        # the verifier): they go to the agent's own processes through exec only.
        box.exec_env = {k: v for k, v in wired.items() if k in SECRET_VARS}
        env = {**env, **{k: v for k, v in wired.items() if k not in SECRET_VARS}}
        # on the host, the trial reaches the services it was just told of and nothing else
        box.host_ports = runtime.open_host_ports(box.network, gateway_ports(wired, box.network.gateway))
    if (disks := runtime.loop_disks()) is not None:
        _mount_loop_disk(runtime, disks, box, name, environment.storage_mb)
    mounts = list(box.volumes)
    if task.compose is not None:  # sidecars first, on this network under their names
        box.sidecars = start_sidecars(runtime, task, box, name)
        wait_for(runtime, task.compose, task.compose.main, box.sidecars)
        env = {**task.compose.main.environment, **env}  # orchestra's wiring wins over the dataset's
        mounts += volume_mounts(task.compose, task.compose.main, name)
    # shared mode grades in this container: the verifier's static tools are mounted now
    # (read-only; a running container cannot gain a mount later)
    tools = verifier_tools.host_tools() if task.config.verifier.environment_mode == "shared" else {}
    box.static_tools = bool(tools)
    spec = box.container(
        "agent", environment, image=image, name=f"{name}-agent", command=["sleep", "infinity"],
        network=box.network.name, workdir=box.workdir, env=env,
        drop_all_capabilities=environment.drop_all_capabilities, mounts=mounts,
        binds={str(AGENT_STACK_SOURCE): AGENT_STACK, **tools, **binds})
    box.agent_container = runtime.create(spec)
    box.containers.append(box.agent_container)
    if box.volumes:
        box.on_disk.append(box.agent_container)
    # /logs/verifier is there from the start, as under Harbor (tasks' solutions check it);
    # what the agent leaves in it is removed before grading (reset_verifier_logs)
    if box.loop_disk is not None:  # /logs is the loop disk's logs folder: make it on the host
        for folder in (AGENT_LOGS, VERIFIER_LOGS, ARTIFACTS):
            path = box.loop_disk.logs / Path(folder).name
            path.mkdir(exist_ok=True)  # the engine may have made it as a mount point already
            path.chmod(0o777)
    runtime.start(box.agent_container)
    if box.trust.enabled:  # the system store too, for programs that read only it
        runtime.exec(box.agent_container, ["sh", "-c", APPEND], user="0", deadline=time.time() + 30)
    if box.loop_disk is None:
        runtime.put_archive(box.agent_container, "/", tar_files(
            {}, dirs=[p.lstrip("/") for p in (LOGS, AGENT_LOGS, VERIFIER_LOGS, ARTIFACTS)]))


def _mount_loop_disk(runtime: Runtime, disks: DiskQuotas, box: Sandbox, name: str,
                     storage_mb: int) -> None:
    """The trial's own disk of storage_mb, its folders as named volumes over the workdir
    and /logs. Named volumes, not bind mounts: the engine fills an empty named volume with
    what the image has at its path (a task image's /app files), a bind would hide them
    (tried: examples/artifact-report loses /app/sales.csv). An engine that does not fill a
    new volume from the image (Podman) gets /logs only: the workdir then stays the image's,
    bounded by the watchdog alone."""
    box.disks = disks
    box.loop_disk = disk = disks.create(box.job, name, storage_mb)
    box.storage_enforcement = "loop-volume+watchdog"
    parts = (("work", box.workdir), ("logs", LOGS)) if runtime.volume_copy_up else (("logs", LOGS),)
    if not runtime.volume_copy_up:
        box.storage_enforcement = "loop-volume(/logs)+watchdog"
    for part, target in parts:
        volume = runtime.create_bind_volume(f"{name}-{part}", str(disk.mountpoint / part),
                                            box.labels("volume"))
        box.volumes.append(VolumeMount(source=volume, target=target))


class _Unread(enum.Enum):
    """`got` not given: require_runtime reads the runtime from the engine itself."""
    READ = enum.auto()


def require_runtime(runtime: Runtime, box: Sandbox, container: str, role: str,
                    got: str | None | _Unread = _Unread.READ) -> None:
    """Record the OCI runtime `container` runs under, read back from the engine (`got` when
    the caller has just read it), as box.runtimes[role]. A container asked to run under the
    trial's runtime (gVisor) that the engine started under another is a launch failure,
    never a silent downgrade."""
    if got is _Unread.READ:
        got = runtime.limits(container).oci_runtime
    box.runtimes[role] = got or "default"
    if box.oci_runtime is not None and got != box.oci_runtime:
        raise RuntimeFault(f"the {role} container runs under {got or 'the default runtime'}, "
                           f"not {box.oci_runtime} as asked")


def gateway_ports(env: dict[str, str], gateway: str) -> list[int]:
    """The ports of the URLs in `env` that point at the trial's gateway."""
    ports = set()
    for value in env.values():
        for word in value.split(","):
            try:
                url = urllib.parse.urlsplit(word.strip())
                if url.hostname == gateway and url.port:
                    ports.add(url.port)
            except ValueError:
                continue
    return sorted(ports)


def applied_limits(runtime: Runtime, box: Sandbox, task: Task) -> AppliedLimits:
    """Read the agent container's quotas back from the engine: what it really got."""
    limits = read_limits(runtime, box.agent, task.config.environment.storage_mb,
                         box.storage_enforcement)
    limits.network_internal = box.network.internal if box.network else None
    limits.host_isolation = box.network.host_isolation if box.network else None
    limits.host_ports = box.host_ports
    return limits


def read_limits(runtime: Runtime, container: str, storage_mb: int,
                storage_enforcement: str) -> AppliedLimits:
    """Any container's quotas, read back from the engine (agent, verifier, worker)."""
    got = runtime.limits(container)
    return AppliedLimits(
        nano_cpus=got.nano_cpus, memory_bytes=got.memory_bytes, memswap_bytes=got.memswap_bytes,
        pids_limit=got.pids_limit, host_pids_limit=got.host_pids_limit, cap_drop=got.cap_drop, cap_add=got.cap_add,
        security_opt=got.security_opt, init=got.init, network=got.network,
        storage_mb=storage_mb, storage_enforcement=storage_enforcement,
        log_max_size=got.log_max_size, oci_runtime=got.oci_runtime)


class Unhealthy(Exception):
    """[environment] healthcheck never passed: the environment did not come up."""


def wait_healthy(runtime: Runtime, box: Sandbox, check: Healthcheck) -> int:
    """Docker HEALTHCHECK semantics before the agent starts: during start_period_sec a
    failure does not count (checks every start_interval_sec); after it, `retries`
    consecutive failures (every interval_sec) fail the trial. Returns the checks run."""
    started = time.monotonic()
    failures = checks = 0
    while True:
        checks += 1
        outcome = runtime.exec(box.agent, ["sh", "-c", check.command],
                               deadline=time.time() + check.timeout_sec, workdir=box.workdir)
        if outcome.exit_code == 0:
            return checks
        in_start = time.monotonic() - started < check.start_period_sec
        if not in_start:
            failures += 1
            if failures >= check.retries:
                raise Unhealthy(f"[environment] healthcheck failed {failures} time(s) in a row "
                                f"(last exit code {outcome.exit_code}): {check.command[:200]}")
        time.sleep(check.start_interval_sec if in_start else check.interval_sec)


def _public_network(box: Sandbox) -> Network:
    """A public network for this trial: its own, or one more from the job's pool."""
    if box.network is not None and not box.network.internal:
        return box.network
    if box.extra_networks:  # one per trial, reused by its later steps
        return box.extra_networks[-1]
    assert box.networks is not None
    network = box.networks.acquire(internal=False)
    box.extra_networks.append(network)
    return network


def verifier_network(box: Sandbox, policy: str) -> str:
    """The network a fresh verifier container joins under the verifier's policy (an
    allowlist: the trial's internal network, out only through its egress proxy)."""
    if policy == "allowlist":
        assert box.network is not None
        return box.network.name
    return "none" if policy == "no-network" else _public_network(box).name


def switch_network(runtime: Runtime, box: Sandbox, policy: str, container: str,
                   back: bool = False) -> None:
    """Live grading under the verifier's policy, when it differs from the agent's; with
    `back`, the agent's network again (the next step of a multi-step task)."""
    assert box.network is not None
    if box.egress is not None:  # the allowlist's proxy follows the phase's policy
        phase = "agent" if back else "verifier"
        box.egress.set_policy(policy, box.allowed_hosts.get(phase, []))
    extra = box.extra_networks[-1] if box.extra_networks else None
    if back:
        if extra is not None:
            runtime.disconnect_network(container, extra.name)
        runtime.connect_network_if_absent(container, box.network.name)
        return
    if policy == "public" and box.network.internal:
        runtime.connect_network(container, _public_network(box).name)
    elif policy == "no-network" and not box.network.internal:
        runtime.disconnect_network(container, box.network.name)


def reset_verifier_logs(box: Sandbox) -> None:
    """Shared mode: whatever the agent left at /logs/verifier is removed on the host side."""
    if box.loop_disk is None:
        return
    target = box.loop_disk.logs / Path(VERIFIER_LOGS).name
    if target.is_symlink() or target.is_file():
        target.unlink(missing_ok=True)
    elif target.is_dir():
        # renamed away first (atomic, whatever a live agent process is writing in it), then
        # removed best-effort: a process churning files there cannot fail the grading
        trash = box.loop_disk.logs / f".orchestra-trash-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(target, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)


def close_sandbox(runtime: Runtime, box: Sandbox) -> float:
    """Remove everything the sandbox made, in reverse order; never raises. Returns seconds."""
    started = time.monotonic()
    for container in reversed(box.containers):
        _quietly(runtime.remove, container)
    for image in box.images:
        _quietly(runtime.remove_image, image)
    for volume in [v.source for v in box.volumes] + box.named_volumes:
        _quietly(runtime.remove_volume, volume)
    if box.loop_disk is not None and box.disks is not None:
        _quietly(box.disks.remove, box.loop_disk)
    if box.networks is not None:
        for network in ([box.network] if box.network else []) + box.extra_networks:
            box.networks.release(network)
    return time.monotonic() - started


def _quietly(action: Callable[..., object], *args: object) -> None:
    try:
        action(*args)
    except Exception as exc:  # cleanup goes on; the reaper catches what is left
        log.warning("cleanup.failed", action=getattr(action, "__name__", str(action)),
                    target=str(args[0]) if args else "", error=str(exc))
