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

Traffic a trial sends *through* the host (FORWARD: a `public` trial's egress, a build's
RUN steps) is the internet's, not the host's neighbourhood: one chain, jumped to from Docker's
DOCKER-USER for packets from any orchestra bridge to a non-orchestra interface, refuses
link-local addresses (169.254.0.0/16: the route a cloud VM's metadata service, and its
credentials, takes) and every network the host is directly attached to (its LAN, Docker's
default bridge, other engines' bridges), except DNS to the host's own resolvers:

    ORC-FORWARD:  UDP/TCP 53 to a resolver of /etc/resolv.conf   RETURN (Docker's rules go on)
                  169.254.0.0/16, each attached network         REJECT (at once)

as the egress proxy refuses them for `allowlist` trials. Builds run on a network of their own
(`orchestra-build`, see runtime/docker/networks.py), isolated like a trial's, so a Dockerfile's
RUN reaches neither the host's services nor its neighbourhood either.

Both are read back for every trial a network is handed to (`recheck`: the jump by
`iptables -C`, the chains by `-S`, ~4 calls) and written again when another process or an
`iptables -F` removed or changed them: a flushed chain mid-job leaves no later trial
unprotected (tests/hostile/test_firewall_recheck.py).

IPv4 only, because a trial has no IPv6: orchestra never creates an IPv6 network (no
`--ipv6`; a dataset's compose asking for `enable_ipv6` is refused at load), and Docker sets
`disable_ipv6 = 1` inside a container on an IPv4-only network (read back by the test), so
the host's link-local fe80:: address on a trial bridge is not reachable from the trial.

Needs root and iptables; without them the result says `host_isolation: none` and
authentication (relay signatures, proxy tokens) is what holds.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import subprocess
import threading

from orchestrator.log import get_logger
from orchestrator.runtime.subnets import attached_routes

log = get_logger()
FORWARD_CHAIN = "ORC-FORWARD"
LINK_LOCAL = "169.254.0.0/16"
_forward_lock = threading.Lock()
_forward_rules = 0  # how many rules this process last wrote into ORC-FORWARD (0: none yet)


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("iptables") is not None


def bridge_name(network: str) -> str:
    """The bridge interface orchestra names for a network (Linux allows 15 characters)."""
    return "orc" + hashlib.sha256(network.encode()).hexdigest()[:12]


def chain_name(network: str) -> str:
    return "ORC-" + bridge_name(network)[3:]


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
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


def _resolvers(path: str = "/etc/resolv.conf") -> list[str]:
    """The host's IPv4 DNS servers (a container's queries Docker forwards to them)."""
    found: list[str] = []
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            try:
                if ipaddress.ip_address(parts[1]).version == 4:
                    found.append(parts[1])
            except ValueError:
                continue
    return found


def _forward_rule_lines(routes: list[str], resolvers: list[str]) -> list[str]:
    """The ORC-FORWARD chain as iptables-restore lines (its jump excluded)."""
    lines = [f":{FORWARD_CHAIN} - [0:0]", f"-F {FORWARD_CHAIN}"]
    for ns in sorted(set(resolvers)):
        lines += [f"-A {FORWARD_CHAIN} -d {ns}/32 -p {proto} -m {proto} --dport 53 -j RETURN"
                  for proto in ("udp", "tcp")]
    for net in [LINK_LOCAL, *sorted(set(routes) - {LINK_LOCAL})]:
        lines.append(f"-A {FORWARD_CHAIN} -d {net} -j REJECT --reject-with icmp-net-unreachable")
    return lines


def _forward_jump() -> list[str]:
    return ["DOCKER-USER", "-i", "orc+", "!", "-o", "orc+", "-m", "comment", "--comment",
            "orchestra:forward", "-j", FORWARD_CHAIN]


def _forward_intact() -> bool:
    """ORC-FORWARD as this process wrote it (its rule count, the link-local refusal among
    them) and DOCKER-USER's jump to it, read back from the kernel."""
    if not _forward_rules or _iptables("-C", *_forward_jump()).returncode != 0:
        return False
    listed = _iptables("-S", FORWARD_CHAIN)
    rules = [line for line in listed.stdout.splitlines() if line.startswith("-A ")]
    return listed.returncode == 0 and len(rules) == _forward_rules and any(LINK_LOCAL in r for r in rules)


def guard_forward() -> bool:
    """ORC-FORWARD written whole (atomically) and jumped to from DOCKER-USER: read back on
    every call (each trial's network), written again when absent or changed (the host's
    attached networks as they are now; orchestra's own bridges are left out, the jump does
    not apply between them and Docker's isolation chains already drop that)."""
    global _forward_rules
    with _forward_lock:
        if _forward_intact():
            return True
        if _forward_rules:  # it was written, and someone removed or changed it since
            log.warning("firewall.forward_rewritten", chain=FORWARD_CHAIN)
        routes = [cidr for iface, cidr in attached_routes() if not iface.startswith("orc")]
        rules = _forward_rule_lines(routes, _resolvers())
        lines = ["*filter", *rules, "COMMIT", ""]
        result = subprocess.run(["iptables-restore", "-w", "10", "--noflush"], input="\n".join(lines),
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            log.warning("firewall.forward_failed", error=result.stderr.strip()[:300])
            return False
        if _iptables("-C", *_forward_jump()).returncode != 0:
            jumped = _iptables("-I", *_forward_jump())
            if jumped.returncode != 0:  # no DOCKER-USER (an engine that is not Docker's)
                log.warning("firewall.forward_jump_failed", error=jumped.stderr.strip()[:300])
                return False
        _forward_rules = sum(1 for line in rules if line.startswith("-A "))
        return True


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
    if not guard_forward():
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


def recheck(network: str, gateway: str) -> bool:
    """A network about to be handed to a trial, its chain closed as this process left it:
    read back (ORC-FORWARD and its jump, the network's jump, its chain; ~5 ms) and written
    again where another process or an `iptables -F` removed or changed any of them."""
    if not available():
        return False
    if not guard_forward():
        return False
    bridge, chain = bridge_name(network), chain_name(network)
    if _iptables("-C", *_jump(bridge, chain)).returncode == 0 and _closed(chain):
        return True
    log.warning("firewall.rewritten", bridge=bridge, network=network[:64])
    return isolate(network, gateway)


def ensure(network: str, gateway: str) -> bool:
    """isolate() again for a network kept from an earlier job (a host reboot or an iptables
    flush would have dropped its rules; a port a killed job left open is closed)."""
    return isolate(network, gateway)


def open_ports(network: str, gateway: str, ports: list[int]) -> bool:
    """Exactly `ports` of the gateway open to the network's containers (TCP); the chain's
    jump and ORC-FORWARD put back too if someone removed them."""
    if not available() or not guard_forward():
        return False
    bridge, chain = bridge_name(network), chain_name(network)
    if not _fill(chain, gateway, ports):
        return False
    if _iptables("-C", *_jump(bridge, chain)).returncode != 0:
        log.warning("firewall.rewritten", bridge=bridge, network=network[:64])
        return _iptables("-I", *_jump(bridge, chain)).returncode == 0
    return True


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
