"""Real parts the tests start on loopback and stop again: a private registry with
authentication (Debian's docker-registry, distribution 2.8, htpasswd), a Podman engine
(Debian's podman, `podman system service`) with its storage under the test's folder, and
an ssh server (Debian's openssh-server) through which the engine is reached as ssh://."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
HTPASSWD = shutil.which("htpasswd")
PODMAN = shutil.which("podman")
SSHD = "/usr/sbin/sshd"
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
    cmd: list[str]  # `podman` on the same store, locks and settings as the service


def _mounts() -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]


def _processes_under(root: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(root).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _end_processes_under(root: Path, timeout: float = 10) -> None:
    """Processes whose command line names `root`: killed (conmons of exec sessions linger
    past the reset, and one that exits later runs `podman container cleanup`, which mounts
    the store again), then waited for until `timeout`."""
    deadline = time.monotonic() + timeout
    while (pids := _processes_under(root)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.1)


def _unmount_under(root: Path) -> None:
    for mount in sorted((m for m in _mounts() if m.startswith(str(root))), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, timeout=60)


@contextmanager
def podman_engine(root: Path, insecure_registries: tuple[str, ...] = (), load: tuple[str, ...] = ()):
    """Podman's Docker-compatible socket with a store of its own (no image of the Docker
    engine's unless `load` names it); `insecure_registries` are reached over plain HTTP.
    Nothing of it is left when the block ends (its overlay mounts included).

    Every podman state it has is its own: store, run root, tmpdir, and file locks in that
    tmpdir instead of Podman's default, one shared-memory segment (/dev/shm/libpod_lock) for
    every Podman on the host. A process killed while holding one of those locks (the
    teardown kills a lingering `podman container cleanup`) leaves it held for the next
    Podman; a file lock dies with its holder.

    The run root and tmpdir are in a short folder of their own under /tmp, not under
    `root`: Podman refuses a run root longer than 50 characters (its sockets' paths must
    fit), and pytest's temp folder grows with the machine's history. CI's stop-54 failure
    was this: /tmp/pytest-of-root/pytest-11/popen-gw0/podman0/run is 51 characters (50 with
    pytest-0 here), the service exited at once saying so, and the old fixture had thrown
    its words away and waited 30 s for a socket."""
    if PODMAN is None or not os.path.exists("/usr/libexec/podman/catatonit"):
        pytest.skip("podman and catatonit are not installed (make test installs them)")
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "containers.conf"
    conf.write_text('[engine]\nlock_type = "file"\n')
    settings = [f"CONTAINERS_CONF={conf}"]
    if insecure_registries:
        registries = root / "registries.conf"
        registries.write_text("".join(f'[[registry]]\nlocation = "{r}"\ninsecure = true\n\n'
                                      for r in insecure_registries))
        settings.append(f"CONTAINERS_REGISTRIES_CONF={registries}")
    short = Path(tempfile.mkdtemp(prefix="orchestra-pm-", dir="/tmp"))  # 26 characters
    cmd = ["env", *settings, PODMAN, "--root", str(root / "storage"), "--runroot", str(short / "run"),
           "--tmpdir", str(short / "tmp")]
    sock = root / "podman.sock"
    log = root / "service.log"
    with log.open("wb") as out:
        service = subprocess.Popen([*cmd, "--log-level", "info", "system", "service", "--time=0",
                                    f"unix://{sock}"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90  # a bound under a loaded machine, not a retry
        while not sock.exists() and service.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if not sock.exists():
            state = "exited " + str(service.returncode) if service.poll() is not None else "still running"
            raise RuntimeError(f"podman system service made no socket at {sock} in 90 s ({state}); "
                               f"it said:\n{log.read_text(errors='replace')[-3000:]}")
        for image in load:  # from the Docker engine
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            subprocess.run([*cmd, "load"], stdin=save.stdout, check=True, capture_output=True)
            save.wait()
        yield Podman(f"unix://{sock}", cmd)
    finally:
        service.terminate()
        service.wait(timeout=30)
        subprocess.run([*cmd, "system", "reset", "--force"], capture_output=True, timeout=120)
        # conmon runs `podman container cleanup` as its containers exit, which mounts the
        # store's overlay again: end those before unmounting what they left
        for folder in (root, short):
            _end_processes_under(folder)
        for folder in (root, short):
            _unmount_under(folder)  # its storage's overlay mount outlives the service
            shutil.rmtree(folder, ignore_errors=True)
    assert not [m for m in _mounts() if m.startswith((str(root), str(short)))]


def podman_images(podman: Podman) -> list[str]:
    out = subprocess.run([*podman.cmd, "images", "--format", "{{.Repository}}:{{.Tag}}"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.split()


SSHD_CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {root}/host_key
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
"""

CLIENT_CONFIG = """Host 127.0.0.1
  Port {port}
  User root
  IdentityFile {root}/client_key
  IdentitiesOnly yes
  UserKnownHostsFile {root}/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
"""


@dataclass
class SshEngine:
    url: str  # ssh://root@127.0.0.1:PORT, for DOCKER_HOST
    env: dict[str, str]  # PATH with an `ssh` that uses the test's keys and known host
    log: Path


@contextmanager
def ssh_engine(root: Path):
    """The local engine behind an sshd on loopback that knows only a key made here; the
    client's `ssh` (first on PATH in `env`) trusts only this server's host key. OpenSSH reads
    the passwd entry's ~/.ssh, not $HOME's, so the test's settings go in with -F."""
    if not os.path.exists(SSHD):
        pytest.skip("openssh-server is not installed (make test installs it)")
    root.mkdir(parents=True, exist_ok=True)
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)], check=True)
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    port = free_port()
    host_pub = (root / "host_key.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (root / "sshd_config").write_text(SSHD_CONFIG.format(port=port, root=root))
    (root / "ssh_config").write_text(CLIENT_CONFIG.format(port=port, root=root))
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {root}/ssh_config "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    log = root / "sshd.log"
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")],
                              stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        _wait_port(port)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        yield SshEngine(f"ssh://root@127.0.0.1:{port}", env, log)
    finally:
        server.terminate()
        server.wait(timeout=30)


def close_listener(listener: socket.socket) -> None:
    """Close a listening socket that a thread is blocked in accept() on. close() alone does
    not wake that thread (Linux keeps the socket open under the blocked call, still
    listening), and the stale thread went on taking connections: in the two-worker suite one
    took the engine-500s test's unix connections in the same worker (124 s instead of 17 s,
    and an IndexError on its AF_UNIX peer). shutdown() ends the accept (EINVAL) first."""
    try:
        listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    listener.close()


def accept_forever(listener: socket.socket, serve) -> None:
    """Each connection to `listener` served on a thread of its own, until close_listener."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=serve, args=(client,), daemon=True).start()


def pipe(src: socket.socket, dst: socket.socket) -> None:
    """Bytes from src to dst; the end of src's input passes on as one (an exec's stdin
    closing), a broken connection breaks both."""
    how = socket.SHUT_WR
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        how = socket.SHUT_RDWR
    for sock in (dst,) if how == socket.SHUT_WR else (src, dst):
        try:
            sock.shutdown(how)
        except OSError:
            pass


def pipe_both_ways(client: socket.socket, upstream: socket.socket) -> None:
    back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
    back.start()
    pipe(client, upstream)
    back.join()


class EngineFront:
    """A unix socket in front of the real engine's, passing bytes both ways (exec streams
    and archives included), that can be made to fail like a sick engine: while failing it
    drops every open connection and answers each new request with HTTP 500."""

    def __init__(self, path: Path, engine: str = "/var/run/docker.sock"):
        self.path, self.engine = path, engine
        self.failing = threading.Event()
        self.answered_500 = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(128)
        threading.Thread(target=accept_forever, args=(self._server, self._serve), daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def fail(self) -> None:
        self.failing.set()
        with self._lock:
            for sock in list(self._open):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def heal(self) -> None:
        self.failing.clear()

    def close(self) -> None:
        close_listener(self._server)
        self.fail()


    def _serve(self, client: socket.socket) -> None:
        if self.failing.is_set():
            head = b""
            try:
                client.settimeout(5)
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    chunk = client.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                body = b'{"message":"injected: the engine is failing"}'
                client.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                               b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
                with self._lock:
                    self.answered_500 += 1
            except OSError:
                pass
            client.close()
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.engine)
        except OSError:
            client.close()
            return
        with self._lock:
            self._open.update((client, upstream))

        pipe_both_ways(client, upstream)
        with self._lock:
            self._open.difference_update((client, upstream))
        client.close()
        upstream.close()


def dockerd_command() -> list[str] | None:
    """The running dockerd's command line, when this host runs exactly one we may restart
    (started by scripts/ensure-docker.sh, not a service manager's): else None."""
    out = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True).stdout.split()
    if len(out) != 1 or Path("/run/systemd/system").is_dir():
        return None
    return Path(f"/proc/{out[0]}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
