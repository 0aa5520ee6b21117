"""Ray backend throughput: the same 16 sleeping trials on a 1-node and on a 2-node cluster
(both nodes on this machine, on loopback, sharing its Docker engine), as a ratio; then
`--registry` on a 2-node cluster whose nodes have engines of their own (the head on
Docker, a worker on Podman with only the offline base loaded), the same cold job (tasks
whose images neither engine has) with and without a registry (Debian's docker-registry
with htpasswd, on loopback).

    ray_16_seconds_1_node, ray_16_seconds_2_nodes, ray_throughput_ratio_2_vs_1
    ray_cold_seconds_no_registry, ray_cold_seconds_registry, ray_registry_speedup
    ray_images_pulled_registry  images the nodes pulled instead of building
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "ray"))

from cluster import Cluster, loopback_env  # noqa: E402
from conftest import make_task  # noqa: E402
from parts import podman_engine, private_registry  # noqa: E402

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


def timed_run(task: Path, address: str, jobs: Path, name: str) -> float:
    started = time.perf_counter()
    subprocess.run([ORCHESTRA, "run", "--path", str(task), "--agent", "oracle", "-k", "16", "-n", "16", "-q",
                    "--backend", "ray", "--ray-address", address, "--jobs-dir", str(jobs), "--job-name", name],
                   check=True, capture_output=True, env=loopback_env())
    return time.perf_counter() - started


def cold_tasks(root: Path, n: int) -> Path:
    """n tasks whose images no engine has yet, each with a real build step."""
    run = uuid.uuid4().hex[:8]
    for i in range(n):
        make_task(root, f"cold-{i}", solve="touch /app/ok\n", dockerfile=(
            "FROM python:3.12-slim-bookworm\nWORKDIR /app\n"
            f"RUN python3 -c \"import time; time.sleep(2); open('/app/built', 'w').write('{run}-{i}')\"\n"))
    return root


def registry_run(tmp: Path) -> None:
    with private_registry(tmp / "registry") as registry, \
            podman_engine(tmp / "pm", insecure_registries=(registry.host,),
                          load=("orchestra/base:bookworm",)) as podman:
        cluster = Cluster(tmp)
        env = {**loopback_env(), "DOCKER_CONFIG": str(registry.credentials)}
        try:
            cluster.start_head(cpus=2, env={"DOCKER_CONFIG": str(registry.credentials)})
            cluster.add_worker("podman", cpus=2, env={"DOCKER_HOST": podman.url,
                                                      "DOCKER_CONFIG": str(registry.credentials)})
            times, pulled = {}, 0
            for label, extra in (("no_registry", []), ("registry", ["--registry", f"{registry.host}/bench"])):
                tasks = cold_tasks(tmp / f"ds-{label}", 4)
                started = time.perf_counter()
                subprocess.run([ORCHESTRA, "run", "--path", str(tasks), "--agent", "oracle", "-k", "2", "-n", "8",
                                "-q", "--backend", "ray", "--ray-address", cluster.address, "--jobs-dir",
                                str(tmp / "jobs"), "--job-name", label, *extra],
                               check=True, capture_output=True, env=env)
                times[label] = time.perf_counter() - started
                if label == "registry":
                    pulled = sum(len(json.loads(p.read_text()).get("image_pulled_from") or [])
                                 for p in (tmp / "jobs" / label / "trials").glob("*/result.json"))
        finally:
            cluster.stop()
    print(f"ray_cold_seconds_no_registry={times['no_registry']:.2f}")
    print(f"ray_cold_seconds_registry={times['registry']:.2f}")
    print(f"ray_registry_speedup={times['no_registry'] / times['registry']:.2f}")
    print(f"ray_images_pulled_registry={pulled}")


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
    with tempfile.TemporaryDirectory(prefix="rb") as tmp_name:  # short: Podman's socket path
        registry_run(Path(tmp_name))


if __name__ == "__main__":
    main()
