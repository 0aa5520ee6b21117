"""orchestra's own Engine API client (runtime/engine.py) against the real engine: the
contracts DockerRuntime relies on, where docker-py used to give them."""

from __future__ import annotations

import io
import socket
import tarfile

import pytest
from conftest import wait_for

from orchestrator.errors import InfraError
from orchestrator.runtime.base import SandboxSpec
from orchestrator.runtime.docker import connect
from orchestrator.runtime.engine import APIError, Engine, ImageNotFound, NotFound

IMAGE = "orchestra/base:bookworm"


@pytest.fixture
def engine():
    client = Engine(max_pool_size=4)
    yield client
    client.close()


@pytest.fixture
def sleeper(runtime):
    container = runtime.create(SandboxSpec(
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


def test_a_pooled_connection_the_engine_closed_is_replaced_not_an_error(engine):
    engine.info()
    assert len(engine._idle) == 1
    stale = engine._idle[0]
    stale.sock.shutdown(socket.SHUT_RDWR)  # as if the engine had closed an idle connection
    calls = engine.calls
    assert engine.ping()  # sent again on a fresh connection
    assert engine.calls == calls + 1 and stale.sock is None


def test_filters_take_single_values_and_lists(engine, sleeper):
    single = engine.containers(filters={"label": "orchestra.job=engine-client"})
    several = engine.containers(filters={"label": ["orchestra.job=engine-client", "orchestra.pid=1"]})
    none = engine.containers(filters={"label": ["orchestra.job=engine-client", "orchestra.pid=2"]})
    assert [c["Id"] for c in single] == [c["Id"] for c in several] == [sleeper]
    assert none == []


def test_an_archive_read_to_its_end_keeps_the_connection_and_one_abandoned_drops_it(
        engine, sleeper):
    whole = engine.get_archive(sleeper, "/etc/os-release")
    data = b"".join(whole)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getnames() == ["os-release"]
    pooled = len(engine._idle)
    assert pooled == 1
    partial = engine.get_archive(sleeper, "/usr")  # megabytes: read one chunk, then give up
    next(iter(partial))
    partial.close()
    assert len(engine._idle) == 0  # that connection was closed, not pooled mid-body
    assert engine.get_archive(sleeper, "/no/such/path") is None
    assert engine.inspect_container(sleeper)["State"]["Running"] is True


def test_exec_output_stdin_and_exit_code_through_the_hijacked_socket(runtime, sleeper):
    payload = bytes(range(256)) * 4096  # 1 MiB through stdin and back
    echoed = runtime.exec(sleeper, ["cat"], stdin=payload, capture=2 * len(payload))
    assert echoed.exit_code == 0 and echoed.output == payload
    mixed = runtime.exec(sleeper, ["sh", "-c", "echo out; echo err >&2; exit 7"], capture=100)
    assert mixed.exit_code == 7 and sorted(mixed.output.split()) == [b"err", b"out"]
    capped = runtime.exec(sleeper, ["sh", "-c", "head -c 100000 /dev/zero"], capture=10)
    assert capped.exit_code == 0 and capped.output == b"\0" * 10


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
    monkeypatch.setenv("DOCKER_HOST", "ssh://somewhere")
    with pytest.raises(InfraError, match="only unix:// and tcp://"):
        connect()
