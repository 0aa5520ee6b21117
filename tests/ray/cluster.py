"""A real multi-node Ray cluster on this one machine, every node on loopback. Each node is
a `ray start --block` process in its own session, so it is stopped by its own id."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
LOOPBACK = str(Path(__file__).parent / "loopback")  # see loopback/sitecustomize.py


def loopback_env() -> dict[str, str]:
    """The environment for every Ray process of the test cluster, drivers included."""
    paths = [LOOPBACK] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class Cluster:
    def __init__(self, tmp: Path):
        self.port = random.randint(20000, 40000)
        self.address = f"127.0.0.1:{self.port}"
        self.tmp = tmp
        self.nodes: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.tmp / f"ray-{name}.log", "w")
        self.nodes[name] = subprocess.Popen(
            [RAY, "start", "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--block", *args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**loopback_env(), **(env or {})})

    def start_head(self, cpus: int = 2, env: dict[str, str] | None = None) -> None:
        """`env`: the node's own (e.g. DOCKER_HOST: the engine its trials run on)."""
        self._start("head", ["--head", f"--port={self.port}", f"--num-cpus={cpus}",
                             "--include-dashboard=false", "--resources=" + json.dumps({"head": 1})], env)
        self.wait_nodes(1)

    def add_worker(self, name: str, cpus: int = 2, env: dict[str, str] | None = None) -> None:
        self._start(name, [f"--address={self.address}", f"--num-cpus={cpus}",
                           "--resources=" + json.dumps({name: 1})], env)
        self.wait_nodes(len(self.nodes))

    def addresses(self) -> list[str]:
        probe = ("import ray; ray.init(address='%s', _node_ip_address='127.0.0.1', logging_level='ERROR'); "
                 "print(sorted({n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']}))" % self.address)
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env=loopback_env())
        return eval(out.stdout.strip().splitlines()[-1])  # a printed list of strings

    def alive_nodes(self) -> int:
        probe = ("import ray; ray.init(address='%s', _node_ip_address='127.0.0.1', logging_level='ERROR'); "
                 "print(sum(1 for n in ray.nodes() if n['Alive']))" % self.address)
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env=loopback_env())
        try:
            return int(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return 0

    def wait_nodes(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_nodes() >= n:
                return
            time.sleep(1)
        raise RuntimeError(f"ray cluster did not reach {n} nodes; see {self.tmp}/ray-*.log")

    def kill(self, name: str) -> None:
        """Stop one node hard: its whole process group, by the id we started it with."""
        process = self.nodes.pop(name)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)

    def stop(self) -> None:
        for name in list(self.nodes)[::-1]:
            self.kill(name)
