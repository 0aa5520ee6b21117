"""The host firewall is re-read for every trial (issue 45): another process or an
`iptables -F` that removes orchestra's chains mid-job leaves no later trial unprotected.

One job, two trials of one `public` task, one at a time (the second gets the first's network
back from the job's pool). While the first sleeps in its agent phase the test flushes that
network's INPUT chain and ORC-FORWARD and deletes ORC-FORWARD's DOCKER-USER jump; then each
trial dials a TCP service the test binds on all the host's addresses (through its gateway,
the host) and a link-local listener in a network namespace behind a veth the test made
(test_dataset_network.py's neighbours). The first trial, flushed under it, reaches both
(the positive control: the flush opened the way); the second, started after the flush,
reaches neither. Each trial also records its IPv6 state (Docker disables IPv6 in a
container on an IPv4-only network: the firewall's IPv4-only rules cover every path).

Flushing ORC-FORWARD changes what the whole engine's trials are held by: exclusive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_task
from test_dataset_network import IMAGE, LINK_LOCAL, PORT, PROBE, SMALL, Listener, neighbours  # noqa: F401

from orchestrator.runtime import firewall

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
JOB = "fw-recheck"
GATEWAY = ("import socket,struct\nrow=[l.split() for l in open('/proc/net/route') if "
           "l.split()[1]=='00000000'][0]\n"
           "print(socket.inet_ntoa(struct.pack('<L',int(row[2],16))))")
SOLVE = """sleep 8
python3 /opt/probe.py $(python3 /opt/gw.py):$(cat /opt/host-port) {link_local}:{port} > /logs/artifacts/probe.txt
{{ cat /proc/sys/net/ipv6/conf/all/disable_ipv6; grep -vc '^00000000000000000000000000000001' /proc/net/if_inet6 || true; }} \\
  > /logs/artifacts/ipv6.txt
"""

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root (iptables, network namespaces)"),
              pytest.mark.exclusive]


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", "10", *args], capture_output=True, text=True, timeout=30)


def _rules(chain: str) -> list[str]:
    return [line for line in _iptables("-S", chain).stdout.splitlines() if line.startswith("-A ")]


def _first_agent() -> str | None:
    out = subprocess.run(["docker", "ps", "-q", "--filter", f"label=orchestra.job={JOB}",
                          "--filter", "label=orchestra.kind=agent"], capture_output=True, text=True, timeout=30)
    return out.stdout.split()[0] if out.stdout.split() else None


def _network_of(container: str) -> str:
    out = subprocess.run(["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", container],
                         capture_output=True, text=True, timeout=30)
    (name,) = json.loads(out.stdout)
    return str(name)


def test_a_chain_flushed_mid_job_is_written_again_for_the_next_trial(runtime, neighbours, tmp_path):  # noqa: F811
    service = Listener()
    ds = tmp_path / "ds"
    make_task(ds, "flushed", toml=SMALL + 'network_mode = "public"\n[agent]\ntimeout_sec = 120\n',
              solve=SOLVE.format(link_local=LINK_LOCAL, port=PORT),
              dockerfile=f"FROM {IMAGE}\nCOPY probe.py gw.py host-port /opt/\nWORKDIR /app\n",
              files={"environment/probe.py": PROBE, "environment/gw.py": GATEWAY,
                     "environment/host-port": str(service.port)})
    run = subprocess.Popen([ORCHESTRA, "run", "--path", str(ds), "--agent", "oracle", "-q", "-k", "2", "-n", "1",
                            "--jobs-dir", str(tmp_path / "jobs"), "--job-name", JOB],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    flushed: dict[str, list[str]] = {}
    try:
        # hang guard (the first agent container appears within ~30 s; a cold build takes longer)
        deadline = time.monotonic() + 300
        while (agent := _first_agent()) is None:
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-3000:]
            time.sleep(0.1)
        chain = firewall.chain_name(_network_of(agent))
        flushed["before"] = _rules(chain) + _rules(firewall.FORWARD_CHAIN)
        assert _iptables("-F", chain).returncode == 0
        assert _iptables("-F", firewall.FORWARD_CHAIN).returncode == 0
        assert _iptables("-D", *firewall._forward_jump()).returncode == 0
        flushed["after"] = _rules(chain) + _rules(firewall.FORWARD_CHAIN)
        _, stderr = run.communicate(timeout=600)
        assert run.returncode in (0, 1), stderr[-3000:]
        after_job = _rules(firewall.FORWARD_CHAIN)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if not firewall._forward_intact():  # whatever happened, the host keeps its chain
            firewall.guard_forward()
        service.close()
    # the flush happened: the chains held rules (REJECT among them), then none
    assert any("REJECT" in r for r in flushed["before"]) and flushed["after"] == []
    trials = sorted((tmp_path / f"jobs/{JOB}/trials").iterdir(),
                    key=lambda t: json.loads((t / "result.json").read_text())["started_at"])
    probes = [(t / "artifacts/probe.txt").read_text().split() for t in trials]
    gateway = probes[0][0]
    # positive control: the first trial, its chains flushed under it, reached both targets
    assert probes[0] == [gateway, "reached", LINK_LOCAL, "reached"], probes
    assert len(service.peers) == 1
    assert neighbours.read_text().split() != []
    # the second, on the same network after the flush: its chain and ORC-FORWARD written again
    assert probes[1] == [gateway, "refused", LINK_LOCAL, "refused"], probes
    assert len(service.peers) == 1 and len(neighbours.read_text().split()) == 1
    assert any(firewall.LINK_LOCAL in r for r in after_job)
    # and neither trial had IPv6: disabled in the container, no address but loopback's
    for t in trials:
        assert (t / "artifacts/ipv6.txt").read_text().split() == ["1", "0"], t
