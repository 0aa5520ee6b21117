"""Networks and volumes, as a part of DockerRuntime (`NetworksMixin`).

A network is a bridge on its own /28, chosen under a host-wide file lock so that orchestra
processes sharing an engine never race for a block, and isolated from the host by the
firewall where the engine shares this host (`host_isolation` says whether it is). A
network made earlier can be adopted while no container is on it. Containers are connected
and disconnected here; volumes are plain or bind. Removals are idempotent and wait
(bounded) while containers being removed still hold the object.
"""

from __future__ import annotations

from orchestrator.log import get_logger
from orchestrator.paths import LOCK_DIR
from orchestrator.runtime import firewall
from orchestrator.runtime.base import LABEL_KIND, Network, RuntimeFault
from orchestrator.runtime.client import APIError, NotFound
from orchestrator.runtime.docker.shared import DockerState, _removed
from orchestrator.runtime.subnets import host_routes
from orchestrator.util import JsonObject

log = get_logger()
SUBNET_LOCK = LOCK_DIR / "subnets.lock"
# Builds run here, not on the engine's default bridge, where a Dockerfile's RUN reaches every
# host service bound to all addresses: isolated like a trial network (no gateway port open,
# ORC-FORWARD for what goes through the host), shared by every build on this engine.
BUILD_NETWORK = "orchestra-build"


class NetworksMixin(DockerState):
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
        from filelock import FileLock  # when a network is made (the pool reuses them)

        SUBNET_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(SUBNET_LOCK).acquire(poll_interval=0.01):  # trials starting at once queue here
            return self._create_network(name, internal, labels)

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
            self._remember_closed(name, isolated)
            return Network(name=name, gateway=gateway, subnet=str(block), internal=internal,
                           host_isolation="iptables" if isolated else "none")
        raise RuntimeFault("network create failed: every candidate subnet overlapped")

    def _build_net(self) -> str | None:
        """The network a build's RUN steps use, made or adopted (isolated again) once per
        process; None where no firewall can hold it (a remote engine, no iptables, an engine
        that did not take orchestra's bridge name): the engine's default, as `docker build`."""
        if not self.local_engine or not firewall.available():
            return None
        with self._lock:
            if self._build_network is not None:
                return self._build_network or None
        found = self._isolated_build_network()
        with self._lock:
            self._build_network = found or ""
        return found

    def _isolated_build_network(self) -> str | None:
        for _ in range(3):
            try:
                config = _ipam(self.api.inspect_network(BUILD_NETWORK))
            except NotFound:
                try:
                    self.create_network(BUILD_NETWORK, internal=False,
                                        labels={LABEL_KIND: "build-network"})
                except RuntimeFault as exc:
                    if "already exists" not in str(exc):
                        raise
                continue  # made (by us or by another process at the same moment): read it back
            if config.get("Gateway") and firewall.ensure(BUILD_NETWORK, config["Gateway"]):
                return BUILD_NETWORK
            log.warning("network.build_unisolated", network=BUILD_NETWORK)
            return None
        return None

    def remove_network(self, name: str) -> None:
        """Idempotent; waits (bounded) while containers being removed still hold it."""
        gateway = self._gateway_of(name)
        try:
            _removed("network", name, lambda: self.api.remove_network(name),
                     lambda: self._exists(self.api.inspect_network, name))
        finally:
            self._release_block(name)
            with self._lock:
                self._ports_open.pop(name, None)
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
        self._remember_closed(name, isolated)
        return Network(name=name, gateway=config["Gateway"], subnet=config["Subnet"],
                       internal=bool(info.get("Internal")),
                       host_isolation="iptables" if isolated else "none")

    def open_host_ports(self, network: Network, ports: list[int]) -> list[int] | None:
        """Read back from the kernel after each change. A network whose chain this process
        filled closed (made, adopted, or closed after its last trial) and that is asked for
        no ports is only read back (firewall.recheck: rewritten if someone flushed it since):
        most trials open none, and each iptables commit costs 12-16 ms (iptables-nft,
        measured) on the trial's path."""
        if network.host_isolation != "iptables":
            return None
        wanted = sorted(set(ports))
        with self._lock:
            unchanged = not wanted and self._ports_open.get(network.name) == []
        if unchanged:
            return [] if firewall.recheck(network.name, network.gateway) else None
        opened = firewall.open_ports(network.name, network.gateway, wanted)
        with self._lock:
            if opened:
                self._ports_open[network.name] = wanted
            else:
                self._ports_open.pop(network.name, None)
        return firewall.opened(network.name) if opened else None

    def _remember_closed(self, name: str, isolated: bool) -> None:
        """The network's chain was just written with no port open (or it has none)."""
        with self._lock:
            if isolated:
                self._ports_open[name] = []
            else:
                self._ports_open.pop(name, None)

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

    def remove_volume(self, name: str) -> None:
        """Idempotent; waits (bounded) while a container being removed still uses it."""
        _removed("volume", name, lambda: self.api.remove_volume(name, force=True),
                 lambda: self._exists(self.api.inspect_volume, name))


def _ipam(network: JsonObject) -> JsonObject:
    """A network's address block (Subnet, Gateway) from its inspect, {} if it has none."""
    configs = (network.get("IPAM") or {}).get("Config") or []
    return next((c for c in configs if c.get("Gateway")), {})
