"""`--registry`: build once, pull on the nodes. A real Ray node whose engine has never seen
the task (Podman, with a store of its own: no base image, no stand-in, no build context)
runs it from a private registry with authentication (docker-registry with htpasswd, on
loopback): the driver builds on the Docker engine and pushes, the node pulls and builds
nothing, and the trial scores 1 on Podman."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import make_task
from parts import podman_engine, podman_images, private_registry

# a Ray cluster on loopback, a second engine (Podman) and images removed from both
pytestmark = pytest.mark.exclusive

pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).parent))
from cluster import Cluster, loopback_env  # noqa: E402

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


@pytest.mark.part("registry")
def test_a_node_on_another_engine_pulls_what_the_driver_built_and_pushed(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("rr")  # short: Podman's own socket paths must fit 108 bytes
    task = make_task(tmp_path / "ds", "pushed", solve="touch /app/ok\n",  # new to both engines:
                     dockerfile=f"FROM python:3.12-slim-bookworm\nWORKDIR /app\nLABEL run={uuid.uuid4()}\n")
    with private_registry(tmp_path / "registry") as registry, \
            podman_engine(tmp_path / "pm", insecure_registries=(registry.host,)) as podman:
        assert podman_images(podman) == []  # nothing to build from, nothing to run
        cluster = Cluster(tmp_path)
        try:
            cluster.start_head(cpus=2, env={"DOCKER_HOST": podman.url,
                                            "DOCKER_CONFIG": str(registry.credentials)})
            proc = subprocess.run(
                [ORCHESTRA, "run", "--path", str(task.parent), "--agent", "oracle", "-q",
                 "--backend", "ray", "--ray-address", cluster.address,
                 "--registry", f"{registry.host}/orchestra-test", "--jobs-dir", str(tmp_path / "jobs"),
                 "--job-name", "pushed", "--json", "-"],
                capture_output=True, text=True, timeout=600,
                env={**loopback_env(), "DOCKER_CONFIG": str(registry.credentials)})
        finally:
            cluster.stop()
        assert proc.returncode == 0, proc.stderr[-3000:]
        job = json.loads(proc.stdout)
        trial = json.loads(next((tmp_path / "jobs/pushed/trials").glob("*/result.json")).read_text())
        assert job["mean_reward"] == 1.0, (job["counts"], trial.get("error"))
        assert job["images_built"] == 2 and job["images_pushed"] == 2  # on the driver, once
        agent_image = trial["image"]
        prefix = f"{registry.host}/orchestra-test/"
        task_image = agent_image.rsplit("-", 1)[0]
        assert sorted(trial["image_pulled_from"]) == sorted(
            [prefix + i.replace("/", "__") for i in (agent_image, task_image)]), trial["image_pulled_from"]
        assert trial["limits"]["host_isolation"] == "none"  # it ran on Podman (README "Engines")
        # the node's engine holds the images under their local names only
        # (Podman's compatible API files a name without a registry under docker.io/)
        assert sorted(podman_images(podman)) == sorted(f"docker.io/{i}" for i in (agent_image, task_image))
        # the driver's engine keeps no registry tag either
        tags = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
                              capture_output=True, text=True).stdout.split()
        assert not [t for t in tags if registry.host in t]
        assert agent_image in tags and task_image in tags  # built there, under their names
        subprocess.run(["docker", "rmi", agent_image, task_image], capture_output=True, timeout=120)
