"""Real parts the tests start on loopback and stop again: a private registry with
authentication (Debian's docker-registry, distribution 2.8, htpasswd) and a Podman engine
(Debian's podman, `podman system service`) with its storage under the test's folder."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
HTPASSWD = shutil.which("htpasswd")
PODMAN = shutil.which("podman")
USER, PASSWORD = "orchestra", "s3cret-pass"

CONFIG = """version: 0.1
storage:
  filesystem:
    rootdirectory: {root}
http:
  addr: 127.0.0.1:{port}
auth:
  htpasswd:
    realm: orchestra-test
    path: {htpasswd}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    credentials: Path  # a DOCKER_CONFIG folder whose config.json holds the login
    data: Path  # the registry's storage


@contextmanager
def private_registry(root: Path):
    """A registry that refuses anonymous pulls and pushes; the login is in `credentials`."""
    if not os.path.exists(REGISTRY) or HTPASSWD is None:
        pytest.skip("docker-registry / apache2-utils not installed (make test installs them)")
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    (root / "htpasswd").write_text(subprocess.run(
        [HTPASSWD, "-Bbn", USER, PASSWORD], check=True, capture_output=True, text=True).stdout)
    (root / "config.yml").write_text(CONFIG.format(root=root / "data", port=port, htpasswd=root / "htpasswd"))
    server = subprocess.Popen([REGISTRY, "serve", str(root / "config.yml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(port)
        credentials = root / "docker-config"
        credentials.mkdir()
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        (credentials / "config.json").write_text(json.dumps({"auths": {f"127.0.0.1:{port}": {"auth": auth}}}))
        yield Registry(f"127.0.0.1:{port}", credentials, root / "data")
    finally:
        server.terminate()
        server.wait(timeout=10)


@dataclass
class Podman:
    url: str  # unix:///.../podman.sock, for DOCKER_HOST
    storage: list[str]  # podman's own flags for the same store


def _mounts() -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]


def _unmount_under(root: Path) -> None:
    for mount in sorted((m for m in _mounts() if m.startswith(str(root))), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, timeout=60)


@contextmanager
def podman_engine(root: Path, insecure_registries: tuple[str, ...] = (), load: tuple[str, ...] = ()):
    """Podman's Docker-compatible socket with a store of its own (no image of the Docker
    engine's unless `load` names it); `insecure_registries` are reached over plain HTTP.
    Nothing of it is left when the block ends (its overlay mounts included)."""
    if PODMAN is None or not os.path.exists("/usr/libexec/podman/catatonit"):
        pytest.skip("podman and catatonit are not installed (make test installs them)")
    root.mkdir(parents=True, exist_ok=True)
    storage = ["--root", str(root / "storage"), "--runroot", str(root / "run")]
    sock = root / "podman.sock"
    env = dict(os.environ)
    if insecure_registries:
        conf = root / "registries.conf"
        conf.write_text("".join(f'[[registry]]\nlocation = "{r}"\ninsecure = true\n\n'
                                for r in insecure_registries))
        env["CONTAINERS_REGISTRIES_CONF"] = str(conf)
    service = subprocess.Popen([PODMAN, *storage, "system", "service", "--time=0", f"unix://{sock}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not sock.exists():
            raise RuntimeError(f"podman system service made no socket at {sock} in 30 s")
        for image in load:  # from the Docker engine
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            subprocess.run([PODMAN, *storage, "load"], stdin=save.stdout, check=True, capture_output=True)
            save.wait()
        yield Podman(f"unix://{sock}", storage)
    finally:
        service.terminate()
        service.wait(timeout=30)
        subprocess.run([PODMAN, *storage, "system", "reset", "--force"], capture_output=True, timeout=120)
        _unmount_under(root)  # its storage's overlay mount outlives the service
        shutil.rmtree(root, ignore_errors=True)
    assert not [m for m in _mounts() if m.startswith(str(root))]


def podman_images(podman: Podman) -> list[str]:
    out = subprocess.run([PODMAN, *podman.storage, "images", "--format", "{{.Repository}}:{{.Tag}}"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.split()
