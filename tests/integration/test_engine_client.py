"""The engine client (docker-py's APIClient behind runtime/client.py) against the real
engine: the contracts DockerRuntime relies on, docker-py's errors kept behind the seam, and
an engine reached over tcp:// with TLS and client certificates."""

from __future__ import annotations

import io
import json
import os
import socket
import ssl
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest
from conftest import ROOT, wait_for
from parts import accept_forever, close_listener, pipe_both_ways

from orchestrator.errors import InfraError
from orchestrator.runtime.base import ContainerSpec, RuntimeFault
from orchestrator.runtime.client import APIError, EngineClient, ImageNotFound, NotFound
from orchestrator.runtime.docker import DockerRuntime, connect

IMAGE = "orchestra/base:bookworm"
ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


@pytest.fixture
def engine():
    client = EngineClient(max_pool_size=4)
    yield client
    client.close()


@pytest.fixture
def sleeper(runtime):
    container = runtime.create(ContainerSpec(
        image=IMAGE, name=f"engine-client-{id(runtime)}", command=["sleep", "infinity"], cpus=0.5,
        memory_mb=128, pids_limit=64, labels={"orchestra.job": "engine-client", "orchestra.pid": "1"},
        network="none"))
    runtime.start(container)
    yield container
    runtime.remove(container)


def test_errors_are_typed_by_what_is_missing(engine):
    with pytest.raises(NotFound) as missing:
        engine.inspect_container("orchestra-no-such-container")
    assert missing.value.status_code == 404 and not isinstance(missing.value, ImageNotFound)
    with pytest.raises(ImageNotFound):
        engine.inspect_image("orchestra/no-such-image:0")
    with pytest.raises(ImageNotFound):  # creating from a missing image
        engine.create_container("orchestra/no-such-image:0", command=["true"])
    with pytest.raises(APIError) as refused:  # a conflict is an error, not a NotFound
        engine.create_network("bridge", internal=False, labels={}, subnet="10.213.255.240/28",
                              gateway="10.213.255.241", options={})
    assert refused.value.status_code in (403, 409) and not isinstance(refused.value, NotFound)


def test_docker_py_errors_stay_behind_the_seam(runtime):
    """Callers see orchestra's fault types, never docker-py's."""
    with pytest.raises(RuntimeFault) as failed:
        runtime.connect_network("orchestra-no-such-container", "orchestra-no-such-network")
    assert not isinstance(failed.value, APIError) and isinstance(failed.value.__cause__, APIError)
    assert runtime.image_exists("orchestra/no-such-image:0") is False  # handled inside: no fault


def test_the_pool_is_sized_to_the_concurrency_and_requests_are_counted(engine):
    runtime = DockerRuntime(max_pool_size=24)
    assert runtime.api.api.adapters["http+docker://"].max_pool_size == 24
    calls = engine.calls
    engine.info()
    engine.ping()
    assert engine.calls == calls + 2


def test_filters_take_single_values_and_lists(engine, sleeper):
    single = engine.containers(filters={"label": "orchestra.job=engine-client"})
    several = engine.containers(filters={"label": ["orchestra.job=engine-client", "orchestra.pid=1"]})
    none = engine.containers(filters={"label": ["orchestra.job=engine-client", "orchestra.pid=2"]})
    assert [c["Id"] for c in single] == [c["Id"] for c in several] == [sleeper]
    assert none == []


def test_an_archive_read_whole_or_abandoned_leaves_the_container_usable(engine, runtime, sleeper):
    data = b"".join(engine.get_archive(sleeper, "/etc/os-release"))
    assert data[257:262] == b"ustar"  # a plain tar, not gzip (requests asks for gzip by default)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
        assert tar.getnames() == ["os-release"]
    partial = engine.get_archive(sleeper, "/usr")  # megabytes: read one chunk, then give up
    next(iter(partial))
    partial.close()
    assert engine.get_archive(sleeper, "/no/such/path") is None
    assert engine.inspect_container(sleeper)["State"]["Running"] is True
    assert runtime.exec(sleeper, ["true"]).exit_code == 0


def test_exec_output_stdin_and_exit_code_through_the_hijacked_socket(runtime, sleeper):
    payload = bytes(range(256)) * 4096  # 1 MiB through stdin and back
    echoed = runtime.exec(sleeper, ["cat"], stdin=payload, capture=2 * len(payload))
    assert echoed.exit_code == 0 and echoed.output == payload
    mixed = runtime.exec(sleeper, ["sh", "-c", "echo out; echo err >&2; exit 7"], capture=100)
    assert mixed.exit_code == 7 and sorted(mixed.output.split()) == [b"err", b"out"]
    capped = runtime.exec(sleeper, ["sh", "-c", "head -c 100000 /dev/zero"], capture=10)
    assert capped.exit_code == 0 and capped.output == b"\0" * 10
    # a process that prints at once: its first bytes may come with the engine's answer
    fast = [runtime.exec(sleeper, ["echo", "first-bytes"], capture=100).output for _ in range(20)]
    assert fast == [b"first-bytes\n"] * 20


def test_wait_returns_none_past_its_timeout_and_the_code_after(runtime, sleeper):
    assert runtime.wait(sleeper, 0.3) is None
    runtime.kill(sleeper)
    wait_for(lambda: not runtime.is_running(sleeper), 10)
    assert runtime.wait(sleeper, 5) == 137


def test_an_unreachable_engine_is_an_infra_error_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    with pytest.raises(InfraError) as failed:
        connect()
    assert "Docker engine unreachable" in str(failed.value) and "dockerd" in str(failed.value)


# ---- tcp:// with TLS and client certificates ---------------------------------------------
def _certificates(folder: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, in the layout
    DOCKER_CERT_PATH expects (ca.pem, cert.pem, key.pem)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
            "-keyout", "ca-key.pem", "-out", "ca.pem")
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    (folder / "client.cnf").write_text("extendedKeyUsage=clientAuth\n")
    for name, ext in (("server", "san.cnf"), ("client", "client.cnf")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
                f"{name}-key.pem", "-out", f"{name}.csr")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                "-CAcreateserial", "-days", "1", "-extfile", ext, "-out", f"{name}.pem")
    (folder / "cert.pem").write_bytes((folder / "client.pem").read_bytes())
    (folder / "key.pem").write_bytes((folder / "client-key.pem").read_bytes())


class TlsFront:
    """A TLS endpoint on loopback that requires a client certificate from the test CA and
    pipes each connection to the engine's unix socket (as `dockerd --tlsverify` would)."""

    def __init__(self, certs: Path):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certs / "server.pem", certs / "server-key.pem")
        self.context.load_verify_locations(certs / "ca.pem")
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.refused = 0
        threading.Thread(target=accept_forever, args=(self.listener, self._serve), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            self.refused += 1
            raw.close()
            return
        engine = socket.socket(socket.AF_UNIX)
        engine.connect("/var/run/docker.sock")
        pipe_both_ways(client, engine)

    def close(self) -> None:
        close_listener(self.listener)


def test_an_engine_over_tcp_with_tls_and_client_certificates_runs_a_job(runtime, tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    _certificates(certs)
    front = TlsFront(certs)
    env = {**os.environ, "DOCKER_HOST": f"tcp://127.0.0.1:{front.port}", "DOCKER_TLS_VERIFY": "1",
           "DOCKER_CERT_PATH": str(certs)}
    try:
        proc = subprocess.run([ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples/hello-file"),
                               "--agent", "oracle", "-q", "--jobs-dir", str(tmp_path / "jobs"),
                               "--job-name", "tls"], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "reward 1" in proc.stderr
        # a client certificate the engine's CA did not sign: refused, exit 3, saying so
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=rogue", "-keyout", "key.pem", "-out", "cert.pem"],
                       cwd=certs, check=True, capture_output=True)
        refused = subprocess.run([ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples/hello-file"),
                                  "--agent", "oracle", "-q", "--jobs-dir", str(tmp_path / "jobs")],
                                 capture_output=True, text=True, env=env, timeout=120)
    finally:
        front.close()
    assert refused.returncode == 3 and "Docker engine unreachable" in refused.stderr, refused.stderr[-1000:]
    assert front.refused >= 1


def test_require_passes_where_the_engine_enforces_it(runtime, tmp_path):
    """On the local socket as root: both capabilities held, the trial's disk is a loop volume."""
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples/hello-file"),
                           "--agent", "oracle", "-q", "--jobs-dir", str(tmp_path / "jobs"),
                           "--job-name", "near", "--require", "disk-quota", "--require",
                           "host-isolation", "--json", "-"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    caps = json.loads(proc.stdout)["capabilities"]
    assert (caps["disk_quota"], caps["host_isolation"], caps["why"]) == ("loop-volume", "iptables", {})
    trial = json.loads(next((tmp_path / "jobs/near/trials").glob("*/result.json")).read_text())
    assert trial["limits"]["storage_enforcement"].startswith("loop-volume")
    bad = subprocess.run([ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples/hello-file"),
                          "--agent", "oracle", "--require", "gpu"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--require gpu: not a capability" in bad.stderr


@pytest.mark.part("ssh")
# ---- ssh:// ------------------------------------------------------------------------------
def test_an_engine_over_ssh_runs_a_job_and_an_unknown_host_key_is_refused(runtime, tmp_path):
    """DOCKER_HOST=ssh://: docker-py's SSH adapter over the ssh binary (the user's ssh and
    its config: keys, known hosts) runs `docker system dial-stdio` on the far side. Exec,
    copy in and out all cross the tunnel; the engine counts as on another host."""
    from parts import ssh_engine

    with ssh_engine(tmp_path / "ssh") as ssh:
        env = {**ssh.env, "DOCKER_HOST": ssh.url}
        common = [ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples/hello-file"), "--agent",
                  "oracle", "-q", "--jobs-dir", str(tmp_path / "jobs")]
        proc = subprocess.run([*common, "--job-name", "over-ssh", "--json", "-"], capture_output=True,
                              text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:] + ssh.log.read_text()[-1000:]
        job = json.loads(proc.stdout)
        trial = json.loads(next((tmp_path / "jobs/over-ssh/trials").glob("*/result.json")).read_text())
        assert job["mean_reward"] == 1.0, (job["counts"], trial["error"])
        assert "Accepted publickey for root" in ssh.log.read_text()  # it really went through sshd
        # ssh:// may be another machine: this host's loop disks and firewall are not claimed,
        # the run says so once, and --require turns it into exit 2 before any trial
        caps = job["capabilities"]
        assert (caps["disk_quota"], caps["host_isolation"], caps["local_engine"]) == ("watchdog", "none", False)
        assert "another host" in caps["why"]["disk_quota"] and "disk-quota: not enforced" in proc.stderr
        assert (trial["limits"]["storage_enforcement"], trial["limits"]["host_isolation"]) == ("watchdog", "none")
        required = subprocess.run([*common, "--job-name", "required", "--require", "disk-quota"],
                                  capture_output=True, text=True, env=env, timeout=120)
        assert required.returncode == 2 and "--require disk-quota" in required.stderr, required.stderr[-1500:]
        assert "another host" in required.stderr and not (tmp_path / "jobs/required/trials").exists()
        # the server's key no longer matches what the client knows: refused, exit 3
        (tmp_path / "ssh/known_hosts").write_text(
            (tmp_path / "ssh/known_hosts").read_text().split()[0] + " "
            + (tmp_path / "ssh/client_key.pub").read_text().split(None, 2)[0] + " "
            + (tmp_path / "ssh/client_key.pub").read_text().split()[1] + "\n")
        refused = subprocess.run([*common, "--job-name", "refused"], capture_output=True, text=True,
                                 env=env, timeout=120)
    assert refused.returncode == 3 and "Docker engine unreachable" in refused.stderr, refused.stderr[-1500:]
    assert not (tmp_path / "jobs/refused/trials").exists()
