"""firewall.recheck against a fake kernel (the real one: tests/hostile/test_firewall_recheck.py; this file is named apart from it):
a network handed to a trial is only read back while its chains stand, and written again
when another process or an `iptables -F` removed or emptied them (issue 45)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from orchestrator.runtime import firewall


class Kernel:
    """iptables as far as firewall.py uses it: chains of rules, jumps, restores; counts writes."""

    def __init__(self) -> None:
        self.chains: dict[str, list[str]] = {}
        self.jumps: list[tuple[str, ...]] = []
        self.writes = 0

    def iptables(self, *args: str) -> SimpleNamespace:
        verb, rest = args[0], tuple(args[1:])
        ok = SimpleNamespace(returncode=0, stdout="", stderr="")
        no = SimpleNamespace(returncode=1, stdout="", stderr="no")
        if verb == "-C":
            return ok if rest in self.jumps else no
        if verb in ("-I", "-D", "-F", "-X"):
            self.writes += 1
        if verb == "-I":
            self.jumps.insert(0, rest)
            return ok
        if verb == "-D":
            if rest not in self.jumps:
                return no
            self.jumps.remove(rest)
            return ok
        if verb == "-S":
            if rest[0] not in self.chains:
                return no
            return SimpleNamespace(returncode=0, stderr="", stdout="".join(
                [f"-N {rest[0]}\n"] + [f"{r}\n" for r in self.chains[rest[0]]]))
        if verb == "-F":
            self.chains[rest[0]] = []
            return ok
        if verb == "-X":
            self.chains.pop(rest[0], None)
            return ok
        raise AssertionError(args)

    def restore(self, argv: list[str], input: str = "", **_: object) -> SimpleNamespace:
        assert argv[0] == "iptables-restore"
        self.writes += 1
        for line in input.splitlines():
            if line.startswith(":"):
                self.chains.setdefault(line[1:].split()[0], [])
            elif line.startswith("-F "):
                self.chains[line.split()[1]] = []
            elif line.startswith("-A "):
                self.chains[line.split()[1]].append(line)
        return SimpleNamespace(returncode=0, stdout="", stderr="")


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Kernel:
    fake = Kernel()
    monkeypatch.setattr(firewall, "_iptables", fake.iptables)
    monkeypatch.setattr(subprocess, "run", fake.restore)
    monkeypatch.setattr(firewall, "available", lambda: True)
    monkeypatch.setattr(firewall, "attached_routes", lambda: [("eth0", "10.9.0.0/24")])
    monkeypatch.setattr(firewall, "_resolvers", lambda: ["10.9.0.53"])
    monkeypatch.setattr(firewall, "_forward_rules", 0)
    monkeypatch.setattr(firewall.os.path, "isdir", lambda path: True)
    return fake


def test_a_standing_firewall_is_only_read_and_a_flushed_one_written_again(kernel):
    net, gateway = "orchestra-pool-public-1", "10.213.0.1"
    chain = firewall.chain_name(net)
    assert firewall.isolate(net, gateway)
    assert kernel.chains[chain][-1].endswith("REJECT --reject-with icmp-port-unreachable")
    assert any(firewall.LINK_LOCAL in r for r in kernel.chains[firewall.FORWARD_CHAIN])
    writes = kernel.writes
    assert firewall.recheck(net, gateway) and kernel.writes == writes  # all there: read only

    kernel.chains[chain] = []  # iptables -F of the network's chain
    assert firewall.recheck(net, gateway) and kernel.writes > writes
    assert firewall._closed(chain)

    kernel.chains[firewall.FORWARD_CHAIN] = []  # ORC-FORWARD flushed, its jump deleted
    kernel.jumps.remove(tuple(firewall._forward_jump()))
    kernel.jumps.remove(tuple(firewall._jump(firewall.bridge_name(net), chain)))  # and the INPUT jump
    assert firewall.recheck(net, gateway)
    assert tuple(firewall._forward_jump()) in kernel.jumps
    assert tuple(firewall._jump(firewall.bridge_name(net), chain)) in kernel.jumps
    assert any(firewall.LINK_LOCAL in r for r in kernel.chains[firewall.FORWARD_CHAIN])
    assert firewall._closed(chain)


def test_opening_ports_puts_a_deleted_jump_back(kernel):
    net, gateway = "orchestra-pool-internal-2", "10.213.0.17"
    chain = firewall.chain_name(net)
    assert firewall.isolate(net, gateway)
    kernel.jumps.remove(tuple(firewall._jump(firewall.bridge_name(net), chain)))
    assert firewall.open_ports(net, gateway, [4100])
    assert tuple(firewall._jump(firewall.bridge_name(net), chain)) in kernel.jumps
    assert any("--dport 4100" in r for r in kernel.chains[chain])
