"""Containers, as a part of DockerRuntime (`ContainersMixin`): made from a ContainerSpec
with its limits (CPUs, memory without swap, pids, capabilities, no-new-privileges, an init,
a capped log) and orchestra's labels, then started (never `run()`, which auto-pulls);
their state, health, exit (`wait`), OOM kills and the limits the engine really applied;
tar archives copied in and out; kill and idempotent removal; the writable layers of a
job's running containers; and, for `cleanup` and the reaper, every container, network
and volume orchestra made. Commands run inside them are execs.py's.
"""

from __future__ import annotations

import re
import resource
from collections.abc import Generator
from pathlib import Path
from typing import BinaryIO

from orchestrator.errors import RuntimeMissing
from orchestrator.runtime.base import (
    LABEL_JOB,
    LABEL_PID,
    TRIMMED_CAPABILITIES,
    ContainerLimits,
    ContainerSpec,
    OwnedObject,
    RuntimeFault,
)
from orchestrator.runtime.client import APIError, ImageNotFound, NotFound
from orchestrator.runtime.docker.shared import DockerState, _removed
from orchestrator.util import JsonObject

# Under gVisor the container's pids cgroup counts the sandbox's own host threads (its kernel
# and file proxy: 39-42 idle here, more per mount) and, with the ptrace platform, about 7 per
# process inside: `pids_limit = 64` in the cgroup killed the sandbox before the agent ran
# (exit 2). So under gVisor the task's limit goes to gVisor's kernel as RLIMIT_NPROC, which
# it enforces per sandbox, for root too (fork fails with EAGAIN at the limit, as the cgroup
# makes it under runc), and the cgroup keeps a backstop sized for the sandbox's threads.
GVISOR_PIDS_BASE = 128
GVISOR_PIDS_PER_PROCESS = 16
# What an engine answers a create naming an OCI runtime it has not registered: Docker
# before 25 / from 25 on, Podman.
NO_SUCH_RUNTIME = re.compile(r"unknown runtime specified|unknown or invalid runtime name|"
                             r"OCI runtime \S+ is not available|cannot find OCI runtime", re.IGNORECASE)


class ContainersMixin(DockerState):
    def create(self, spec: ContainerSpec) -> str:
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
        config: JsonObject = {"Labels": spec.labels, "Env": [f"{k}={v}" for k, v in spec.env.items()],
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
        except APIError as exc:
            if spec.runtime and NO_SUCH_RUNTIME.search(str(exc)):
                raise RuntimeMissing(self._no_such_runtime(spec.runtime)) from exc
            raise
        return created["Id"]

    def _no_such_runtime(self, name: str) -> str:
        try:
            has = ", ".join(sorted(self.api.info().get("Runtimes") or {})) or "none listed"
        except APIError:
            has = "unknown: the engine did not say"
        return (f"the engine has no OCI runtime {name!r} (it has: {has}): a container asked for "
                f"it (--oci-runtime or the manifest's sandbox.oci_runtime); install it and register "
                "it in daemon.json (`orchestra tasks check` prints the lines for gVisor's runsc); "
                "not retried")

    def start(self, container: str) -> None:
        self.api.start(container)

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
        """The exit code, or None when the container outlived timeout_sec. An engine answer
        (no such container) is raised: docker-py's APIError is an OSError too, and was once
        taken for a timeout here (a vanished verifier read as verifier_timeout)."""
        try:
            return self.api.wait(container, timeout=timeout_sec)["StatusCode"]
        except APIError:
            raise  # the seam makes it a RuntimeFault
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

    def writable_layer_bytes(self, job: str) -> dict[str, int]:
        rows = self.api.containers(filters={"label": f"{LABEL_JOB}={job}", "status": "running"},
                                   size=True)
        return {row["Id"]: int(row.get("SizeRw") or 0) for row in rows}

    def health(self, container: str) -> tuple[str, str | None]:
        """(State.Status, State.Health.Status or None without a healthcheck)."""
        state = self.api.inspect_container(container)["State"]
        return state.get("Status", ""), (state.get("Health") or {}).get("Status")

    # ---- cleanup --------------------------------------------------------------------
    def labelled(self, *labels: str) -> tuple[list[str], list[str], list[str]]:
        """Containers, networks and volumes orchestra created (they carry orchestra.pid, which
        no image has, so nothing merely inherits it) that also carry every label given."""
        filters = {"label": [*labels, LABEL_PID]}
        containers = [c["Id"] for c in self.api.containers(all=True, filters=filters)]
        networks = [n["Name"] for n in self.api.networks(filters=filters)]
        volumes = [v["Name"] for v in (self.api.volumes(filters=filters).get("Volumes") or [])]
        return containers, networks, volumes

    def owned_objects(self) -> list[OwnedObject]:
        """Every container, network and volume orchestra created: kind, name, labels."""
        rows = [OwnedObject("container", c["Id"], c.get("Labels") or {})
                for c in self.api.containers(all=True, filters={"label": LABEL_PID})]
        rows += [OwnedObject("network", n["Name"], n.get("Labels") or {})
                 for n in self.api.networks(filters={"label": LABEL_PID})]
        rows += [OwnedObject("volume", v["Name"], v.get("Labels") or {})
                 for v in self.api.volumes(filters={"label": LABEL_PID}).get("Volumes") or []]
        return rows


def _ulimit(name: str, which: int, ceiling: int) -> JsonObject:
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
