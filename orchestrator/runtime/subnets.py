"""Small subnets for trial networks, handed out by orchestra (DESIGN 2 step 3).

Docker's default address pools run out at 30 networks; a /28 per trial from a private
range (default 10.213.0.0/16: 4096 networks) does not. Blocks already used by networks on
the engine are skipped, so two orchestra processes on one engine do not collide.
"""

from __future__ import annotations

import ipaddress
import os
import threading

DEFAULT_RANGE = os.environ.get("ORCHESTRA_SUBNET_RANGE", "10.213.0.0/16")
DEFAULT_PREFIX = int(os.environ.get("ORCHESTRA_SUBNET_PREFIX", "28"))
Block = ipaddress.IPv4Network | ipaddress.IPv6Network  # IPv4 unless the range given is IPv6


class SubnetPool:
    def __init__(self, cidr: str = DEFAULT_RANGE, prefix: int = DEFAULT_PREFIX):
        self._range = ipaddress.ip_network(cidr)
        self._prefix = prefix
        self._taken: set[Block] = set()
        self._lock = threading.Lock()

    def acquire(self, in_use: list[str]) -> Block:
        """A free block not overlapping `in_use` (subnets the engine already has)."""
        busy = [ipaddress.ip_network(s, strict=False) for s in in_use]
        with self._lock:
            for block in self._range.subnets(new_prefix=self._prefix):
                if block in self._taken or any(block.overlaps(b) for b in busy):
                    continue
                self._taken.add(block)
                return block
        raise RuntimeError(f"no free /{self._prefix} left in {self._range}")

    def release(self, block: Block) -> None:
        with self._lock:
            self._taken.discard(block)


def host_routes(bridges_only: bool = False) -> list[str]:
    """The IPv4 subnets of the host's directly attached routes, as CIDR; `bridges_only`:
    those of its bridge interfaces (Docker's and orchestra's networks)."""
    return [cidr for iface, cidr in attached_routes()
            if not bridges_only or os.path.isdir(f"/sys/class/net/{iface}/bridge")]


def attached_routes() -> list[tuple[str, str]]:
    """(interface, CIDR) of each directly attached IPv4 route of the host (/proc/net/route)."""
    found: list[tuple[str, str]] = []
    try:
        rows = open("/proc/net/route").read().splitlines()[1:]
    except OSError:
        return found
    for row in rows:
        cols = row.split()
        if len(cols) < 8 or cols[1] == "00000000" or cols[2] != "00000000":
            continue  # the default route, or one through a gateway
        try:
            net = int.from_bytes(bytes.fromhex(cols[1]), "little")
            mask = bin(int.from_bytes(bytes.fromhex(cols[7]), "little")).count("1")
            found.append((cols[0], str(ipaddress.ip_network((net, mask), strict=False))))
        except ValueError:
            continue
    return found
