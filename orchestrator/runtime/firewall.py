"""Per-trial host isolation (DESIGN 3.5): a trial network reaches only its own services.

A container on a Docker bridge (internal or not) can open connections to every address of
the host: docker0, the host's own interfaces and other trials' gateways, where their relays
and model proxies listen (measured), and every port of its own gateway, where any host
service bound to all addresses (sshd, a database, a TCP Docker API) answers (measured).
Binding a server to a gateway is not isolation. So every trial bridge gets its own chain,
jumped to from the host's INPUT chain for packets arriving on that bridge:

    ORC-<bridge hash>:  replies to connections the host opened   ACCEPT
                        TCP to its gateway on an opened port      ACCEPT (one rule per port)
                        anything else                             REJECT (at once, no hang)

A network starts with no port open; `open_ports` sets the ports of the trial now using it
(its relay, model proxy and egress proxy), `open_ports(..., [])` closes them again when the
network goes back to the pool. Traffic through the host (FORWARD: public egress) is
untouched, and so is the container's own DNS (Docker's resolver lives in the container's
namespace).

Needs root and iptables; without them the result says `host_isolation: none` and
authentication (relay signatures, proxy tokens) is what holds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

from orchestrator.log import get_logger

log = get_logger()


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("iptables") is not None


def bridge_name(network: str) -> str:
    """The bridge interface orchestra names for a network (Linux allows 15 characters)."""
    return "orc" + hashlib.sha256(network.encode()).hexdigest()[:12]


def chain_name(network: str) -> str:
    return "ORC-" + bridge_name(network)[3:]


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "10", *args], capture_output=True, text=True, timeout=30)


def _jump(bridge: str, chain: str) -> list[str]:
    return ["INPUT", "-i", bridge, "-m", "comment", "--comment", f"orchestra:{bridge}", "-j", chain]


def _legacy(bridge: str, gateway: str) -> list[str]:
    """The one-rule form of orchestra 0.x (every port of the gateway open)."""
    return ["INPUT", "-i", bridge, "!", "-d", gateway, "-m", "comment", "--comment",
            f"orchestra:{bridge}", "-j", "REJECT"]


def _fill(chain: str, gateway: str, ports: list[int]) -> bool:
    """Write the chain whole (iptables-restore: one atomic commit, no moment when it is
    empty and so open)."""
    lines = ["*filter", f":{chain} - [0:0]", f"-F {chain}",
             f"-A {chain} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"]
    lines += [f"-A {chain} -d {gateway}/32 -p tcp -m tcp --dport {int(p)} -j ACCEPT"
              for p in sorted(set(ports))]
    lines += [f"-A {chain} -j REJECT --reject-with icmp-port-unreachable", "COMMIT", ""]
    result = subprocess.run(["iptables-restore", "-w", "10", "--noflush"], input="\n".join(lines),
                            capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        log.warning("firewall.fill_failed", chain=chain, error=result.stderr.strip()[:300])
    return result.returncode == 0


def isolate(network: str, gateway: str) -> bool:
    """The network's chain (no port open) and the INPUT jump to it. False where the bridge
    is not an interface of this host (a remote engine, or one that did not take orchestra's
    bridge name, as Podman's netavark does not): a rule there would isolate nothing."""
    if not available():
        return False
    bridge, chain = bridge_name(network), chain_name(network)
    if not os.path.isdir(f"/sys/class/net/{bridge}"):
        log.warning("firewall.no_bridge", bridge=bridge, network=network[:64])
        return False
    jumped = _iptables("-C", *_jump(bridge, chain)).returncode == 0
    if jumped and _closed(chain):  # a pool network as its last job left it (the usual claim)
        return True
    if not _fill(chain, gateway, []):
        return False
    if jumped:  # its chain had a port open (its job was killed) or was changed: closed again
        return True
    while _iptables("-D", *_legacy(bridge, gateway)).returncode == 0:
        pass  # a network kept from before chains (no jump yet): its one rule goes
    result = _iptables("-I", *_jump(bridge, chain))
    if result.returncode != 0:
        log.warning("firewall.isolate_failed", bridge=bridge, error=result.stderr.strip()[:300])
        return False
    return True


def _closed(chain: str) -> bool:
    """The chain, read back, is exactly what _fill writes with no port open: replies, then
    REJECT. (Reading costs ~1.5 ms; writing it, any rule at all, 12-16 ms with iptables-nft.)"""
    listed = _iptables("-S", chain)
    rules = [line.split(None, 2)[2] for line in listed.stdout.splitlines() if line.startswith("-A ")]
    return listed.returncode == 0 and len(rules) == 2 and "--ctstate" in rules[0] \
        and rules[0].endswith("-j ACCEPT") and rules[1].startswith("-j REJECT")


def ensure(network: str, gateway: str) -> bool:
    """isolate() again for a network kept from an earlier job (a host reboot or an iptables
    flush would have dropped its rules; a port a killed job left open is closed)."""
    return isolate(network, gateway)


def open_ports(network: str, gateway: str, ports: list[int]) -> bool:
    """Exactly `ports` of the gateway open to the network's containers (TCP)."""
    if not available():
        return False
    return _fill(chain_name(network), gateway, ports)


def opened(network: str) -> list[int] | None:
    """The gateway ports open to the network now, read back from the kernel (None: no chain)."""
    listed = _iptables("-S", chain_name(network))
    if listed.returncode != 0:
        return None
    return sorted(int(line.split("--dport ")[1].split()[0]) for line in listed.stdout.splitlines()
                  if "--dport" in line and "ACCEPT" in line)


def installed(network: str) -> bool:
    """The network's jump and chain are in place."""
    return (_iptables("-C", *_jump(bridge_name(network), chain_name(network))).returncode == 0
            and opened(network) is not None)


def release(network: str, gateway: str) -> None:
    """Remove the network's jump and chain (idempotent: missing ones are fine)."""
    if not available():
        return
    bridge, chain = bridge_name(network), chain_name(network)
    while _iptables("-D", *_jump(bridge, chain)).returncode == 0:
        pass  # delete every copy, should one have been inserted twice
    while _iptables("-D", *_legacy(bridge, gateway)).returncode == 0:
        pass
    _iptables("-F", chain)
    _iptables("-X", chain)
