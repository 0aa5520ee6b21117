"""Ray backend throughput: the same 16 sleeping trials on a 1-node and on a 2-node cluster
(both nodes on this machine, on loopback, sharing its Docker engine), as a ratio.

    ray_16_seconds_1_node, ray_16_seconds_2_nodes, ray_throughput_ratio_2_vs_1
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "ray"))

from cluster import Cluster, loopback_env  # noqa: E402
from conftest import make_task  # noqa: E402

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


def timed_run(task: Path, address: str, jobs: Path, name: str) -> float:
    started = time.perf_counter()
    subprocess.run([ORCHESTRA, "run", "--path", str(task), "--agent", "oracle", "-k", "16", "-n", "16", "-q",
                    "--backend", "ray", "--ray-address", address, "--jobs-dir", str(jobs), "--job-name", name],
                   check=True, capture_output=True, env=loopback_env())
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        task = make_task(tmp / "ds", "sleeper", solve="sleep 5\ntouch /app/ok\n",
                         toml="[environment]\ncpus = 1\nmemory_mb = 128\nstorage_mb = 64\n")
        cluster = Cluster(tmp)
        try:
            cluster.start_head(cpus=2)
            timed_run(task, cluster.address, tmp / "jobs", "warm")  # builds the image once
            one = timed_run(task, cluster.address, tmp / "jobs", "one-node")
            cluster.add_worker("worker1", cpus=2)
            two = timed_run(task, cluster.address, tmp / "jobs", "two-nodes")
        finally:
            cluster.stop()
        print(f"ray_16_seconds_1_node={one:.2f}")
        print(f"ray_16_seconds_2_nodes={two:.2f}")
        print(f"ray_throughput_ratio_2_vs_1={one / two:.2f}")


if __name__ == "__main__":
    main()
