"""Per-trial host isolation (DESIGN 3.5): a trial network reaches only its own gateway.

A container on a Docker bridge (internal or not) can open connections to every address of
the host: docker0, the host's own interfaces and other trials' gateways, where their relays
and model proxies listen (measured). Binding a server to a gateway is not isolation. So
every trial bridge gets one rule in the host's INPUT chain: packets that arrive on that
bridge for any host address other than its own gateway are rejected (at once, no hang). Traffic through the
host (FORWARD: public egress) is untouched, and so is the container's own DNS.

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


def _rule(bridge: str, gateway: str) -> list[str]:
    return ["INPUT", "-i", bridge, "!", "-d", gateway, "-m", "comment", "--comment",
            f"orchestra:{bridge}", "-j", "REJECT"]


def isolate(network: str, gateway: str) -> bool:
    """Drop what the network's containers send to the host, except to its gateway."""
    if not available():
        return False
    bridge = bridge_name(network)
    result = subprocess.run(["iptables", "-w", "10", "-I", *_rule(bridge, gateway)],
                            capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        log.warning("firewall.isolate_failed", bridge=bridge, error=result.stderr.strip()[:300])
        return False
    return True


def ensure(network: str, gateway: str) -> bool:
    """isolate(), unless the network's rule is already there (a network kept from an
    earlier job; a host reboot or an iptables flush would have dropped its rule)."""
    if not available():
        return False
    checked = subprocess.run(["iptables", "-w", "10", "-C", *_rule(bridge_name(network), gateway)],
                             capture_output=True, timeout=30)
    return checked.returncode == 0 or isolate(network, gateway)


def release(network: str, gateway: str) -> None:
    """Remove the network's rule (idempotent: a missing rule is fine)."""
    if not available():
        return
    bridge = bridge_name(network)
    while subprocess.run(["iptables", "-w", "10", "-D", *_rule(bridge, gateway)],
                         capture_output=True, timeout=30).returncode == 0:
        pass  # delete every copy, should one have been inserted twice
