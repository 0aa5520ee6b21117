"""The dataset reaches for the host's network (DESIGN 4): a Dockerfile's RUN dialing the
host's services, and a `public` trial dialing link-local addresses and the host's own
networks (the route a cloud VM's metadata service takes). Every target is made by the test
itself: a TCP service of the host bound to all addresses, and a network namespace behind a
veth pair holding a link-local address and a private one, each with a listener that counts
who connected. The positive control is the same probe from a plain `docker` container on the
engine's default bridge, which reaches every target; through orchestra none is reached.
tests/hostile/README.md has a row per case."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_task
from parts import close_listener

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
IMAGE = "python:3.12-slim-bookworm"  # the tasks' base (stood in for where no registry answers)
PLAIN = "orchestra/base:bookworm"  # the positive controls' (a local image with python3)
PORT = 8077
LINK_LOCAL, PRIVATE = "169.254.77.1", "10.250.77.1"  # the namespace's addresses (test-made)
SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"
# Dials each target, one line each: "<address> reached|refused|timeout".
PROBE = """import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=3) as s:
            s.recv(64)
        print(host, "reached")
    except socket.timeout:
        print(host, "timeout")
    except OSError:
        print(host, "refused")
"""
GRADE = ("mkdir -p /logs/verifier\ncat {probe} >&2\n"
         "if [ -s {probe} ] && ! grep -qv ' refused$' {probe}; then echo 1; else echo 0; fi"
         " > /logs/verifier/reward.txt\n")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (iptables, network namespaces)")


class Listener:
    """A TCP service that says hello and counts connections."""

    def __init__(self, host: str = "0.0.0.0"):
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.peers: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.peers.append(peer[0])
            conn.sendall(b"host service\n")
            conn.close()

    def close(self) -> None:
        close_listener(self.sock)


@pytest.fixture
def host_service() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def neighbours(tmp_path: Path) -> Iterator[Path]:
    """A namespace on a veth pair: the host gets 169.254.77.2/24 and 10.250.77.2/24 (routes
    it is directly attached to), the namespace .1 of each and a listener logging each peer."""
    tag = uuid.uuid4().hex[:6]
    ns, host_end, ns_end = f"orctest-{tag}", f"otv{tag}h", f"otv{tag}n"
    log = tmp_path / "neighbour-peers.log"
    _ip("netns", "add", ns)
    server = None
    try:
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        _ip("link", "set", ns_end, "netns", ns)
        for addr in ("169.254.77.2/24", "10.250.77.2/24"):
            _ip("addr", "add", addr, "dev", host_end)
        _ip("link", "set", host_end, "up")
        for addr in (f"{LINK_LOCAL}/24", f"{PRIVATE}/24"):
            _ip("-n", ns, "addr", "add", addr, "dev", ns_end)
        _ip("-n", ns, "link", "set", ns_end, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        code = ("import socket,sys\ns=socket.create_server(('0.0.0.0',%d))\n"
                "while True:\n c,p=s.accept()\n open(sys.argv[1],'a').write(p[0]+'\\n')\n"
                " c.sendall(b'neighbour\\n'); c.close()\n" % PORT)
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code, str(log)])
        probe = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c",
                                "import socket,time\nfor _ in range(100):\n try:\n"
                                f"  socket.create_connection(('127.0.0.1',{PORT}),1).close(); break\n"
                                " except OSError: time.sleep(0.05)"], timeout=30)
        assert probe.returncode == 0
        log.write_text("")  # the readiness probe's own connection is not a neighbour's peer
        yield log
    finally:
        if server is not None:
            server.kill()
            server.wait(timeout=10)
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _host_addresses() -> list[str]:
    """The host's own IPv4 addresses outside loopback and orchestra's trial bridges."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines()
            if line.split()[1] != "lo" and not line.split()[1].startswith("orc")]


def _run(ds: Path, jobs: Path) -> dict:
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ds), "--agent", "oracle", "-q",
                           "--jobs-dir", str(jobs), "--job-name", "net"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    (result,) = [json.loads(p.read_text()) for p in (jobs / "net/trials").glob("*/result.json")]
    return result


def _plain_docker(args: list[str]) -> str:
    """The positive control: the engine's default bridge, as `docker` gives it."""
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_dockerfile_run_reaches_no_host_service(runtime, host_service, tmp_path):
    targets = [f"{addr}:{host_service.port}" for addr in _host_addresses()]
    # the build's own gateway is the host too: the probe adds it from its routing table
    gateway = ("import socket,struct\nrow=[l.split() for l in open('/proc/net/route') if "
               "l.split()[1]=='00000000'][0]\n"
               "print(socket.inet_ntoa(struct.pack('<L',int(row[2],16))))")
    dockerfile = (f"FROM {IMAGE}\nCOPY probe.py gw.py /\n"
                  f"RUN python3 /probe.py $(python3 /gw.py):{host_service.port} {' '.join(targets)}"
                  " > /probe-build.txt\nWORKDIR /app\n")
    ds = tmp_path / "ds"
    task = make_task(ds, "build-probe", toml=SMALL, dockerfile=dockerfile,
                     test=GRADE.format(probe="/probe-build.txt"),
                     files={"environment/probe.py": PROBE, "environment/gw.py": gateway,
                            "environment/nonce": uuid.uuid4().hex})
    result = _run(ds, tmp_path / "jobs")
    seen_by_orchestra = list(host_service.peers)
    # positive control: the same folder built by plain `docker build` reaches the service
    tag = f"orchestra-test/build-probe:{uuid.uuid4().hex[:8]}"
    plain = task / "environment" / "Dockerfile.plain"
    plain.write_text(dockerfile.replace(f"FROM {IMAGE}", f"FROM {PLAIN}"))
    _plain_docker(["build", "-q", "--no-cache", "-f", str(plain), "-t", tag, str(task / "environment")])
    try:
        control = _plain_docker(["run", "--rm", tag, "cat", "/probe-build.txt"])
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    assert "reached" in control and len(host_service.peers) > len(seen_by_orchestra), control
    # through orchestra: the build ran its probe (the trial graded it) and reached nothing
    assert seen_by_orchestra == []
    assert result["reward"]["reward"] == 1.0, result


def test_a_public_trial_reaches_no_link_local_or_host_network(runtime, neighbours, tmp_path):
    targets = f"{LINK_LOCAL}:{PORT} {PRIVATE}:{PORT}"
    ds = tmp_path / "ds"
    make_task(ds, "neighbours", toml=SMALL + 'network_mode = "public"\n',
              solve=f"python3 /opt/probe.py {targets} > /app/probe.txt\n",
              dockerfile=f"FROM {IMAGE}\nCOPY probe.py /opt/probe.py\nWORKDIR /app\n",
              test=GRADE.format(probe="/app/probe.txt"),
              files={"environment/probe.py": PROBE})
    result = _run(ds, tmp_path / "jobs")
    seen_by_orchestra = neighbours.read_text().split()
    # positive control: a plain container on the default bridge reaches both addresses
    control = _plain_docker(["run", "--rm", "-v", f"{ds / 'neighbours/environment/probe.py'}:/p.py:ro",
                             PLAIN, "python3", "/p.py", *targets.split()])
    assert control.split() == [LINK_LOCAL, "reached", PRIVATE, "reached"], control
    assert len(neighbours.read_text().split()) == 2
    # through orchestra: the agent's probe ran, both refused at once, nothing connected
    assert seen_by_orchestra == []
    assert result["reward"]["reward"] == 1.0, result
