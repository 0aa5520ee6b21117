"""Podman's Docker-compatible socket (Debian's podman 4.3, `podman system service`) as the
engine: the examples run to reward 1.0 through docker-py, and what differs from Docker is
recorded, not hidden (README "Engines"): no host isolation (netavark does not take
orchestra's bridge name), the workdir not on the loop disk (Podman does not fill a volume
from the image). Its own storage under the test's folder: nothing is left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
PODMAN = shutil.which("podman")


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    if PODMAN is None or not os.path.exists("/usr/libexec/podman/catatonit"):
        pytest.skip("podman and catatonit are not installed (make test installs them)")
    root = tmp_path_factory.mktemp("podman")
    storage = ["--root", str(root / "storage"), "--runroot", str(root / "run")]
    sock = root / "podman.sock"
    service = subprocess.Popen([PODMAN, *storage, "system", "service", "--time=0", f"unix://{sock}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    # the offline base, from the Docker engine (what `orchestra images bootstrap` would make)
    save = subprocess.Popen(["docker", "save", "orchestra/base:bookworm"], stdout=subprocess.PIPE)
    subprocess.run([PODMAN, *storage, "load"], stdin=save.stdout, check=True, capture_output=True)
    save.wait()
    yield f"unix://{sock}", storage
    service.terminate()
    service.wait(timeout=30)
    subprocess.run([PODMAN, *storage, "system", "reset", "--force"], capture_output=True, timeout=120)
    _unmount_under(root)  # its storage's overlay mount outlives the service
    shutil.rmtree(root, ignore_errors=True)
    assert not [m for m in _mounts() if m.startswith(str(root))]


def _mounts() -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]


def _unmount_under(root: Path) -> None:
    for mount in sorted((m for m in _mounts() if m.startswith(str(root))), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, timeout=60)


def test_the_examples_run_on_podmans_socket_and_its_differences_are_recorded(podman, tmp_path):
    url, storage = podman
    env = {**os.environ, "DOCKER_HOST": url, "COLUMNS": "200"}
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
    left = subprocess.run([PODMAN, *storage, "ps", "-a", "-q", "--filter", "label=orchestra.pid"],
                          capture_output=True, text=True, timeout=60)
    assert left.stdout.strip() == ""
