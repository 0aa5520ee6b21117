"""Podman's Docker-compatible socket (Debian's podman 4.3, `podman system service`) as the
engine: the examples run to reward 1.0 through docker-py, and what differs from Docker is
recorded, not hidden (README "Engines"): no host isolation (netavark does not take
orchestra's bridge name), the workdir not on the loop disk (Podman does not fill a volume
from the image). Its own storage under the test's folder: nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from parts import podman_engine

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    with podman_engine(tmp_path_factory.mktemp("podman"), load=("orchestra/base:bookworm",)) as engine:
        yield engine.url, engine.cmd


@pytest.mark.part("podman")
def test_the_examples_run_on_podmans_socket_and_its_differences_are_recorded(podman, tmp_path):
    url, podman_cmd = podman
    env = {**os.environ, "DOCKER_HOST": url}
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples"), "--agent", "oracle",
                           "-q", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "podman", "--json", "-"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = json.loads(proc.stdout)
    assert job["n_trials"] == 3 and job["mean_reward"] == 1.0, job["counts"]
    for path in (tmp_path / "jobs/podman/trials").glob("*/result.json"):
        trial = json.loads(path.read_text())
        assert trial["limits"]["host_isolation"] == "none"  # said, never claimed
        assert trial["limits"]["storage_enforcement"] == "loop-volume(/logs)+watchdog"
        assert trial["limits"]["memory_bytes"] > 0 and trial["limits"]["pids_limit"] > 0  # read back
    left = subprocess.run([*podman_cmd, "ps", "-a", "-q", "--filter", "label=orchestra.pid"],
                          capture_output=True, text=True, timeout=60)
    assert left.stdout.strip() == ""


@pytest.mark.part("podman")
def test_the_engine_is_told_apart_by_its_ping(podman, runtime):
    """One /_ping says which engine answers (Podman adds its Libpod-* headers), and its
    differences follow from that: the workdir is not copied up into a volume there."""
    from orchestrator.runtime.client import EngineClient
    from orchestrator.runtime.docker import DockerRuntime

    url, _cmd = podman
    on_podman = DockerRuntime(engine=EngineClient(base_url=url))
    assert on_podman.podman and on_podman.api.server.startswith("Libpod/")
    assert on_podman.engine_facts().kind == "podman" and not on_podman.volume_copy_up
    assert not runtime.podman and runtime.api.server.startswith("Docker/")
    assert runtime.engine_facts().kind == "docker" and runtime.volume_copy_up
