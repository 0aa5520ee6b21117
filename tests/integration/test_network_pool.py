"""Trial networks kept between jobs (orchestrator/host/netpool.py), on the real engine.

A job takes an idle network from the host's pool instead of creating one (~0.07 s) and
parks it instead of removing it (~0.18 s). What must hold: a network in use by a live
process is never handed to another, a claimed network still isolates the host (its
iptables rule is checked and re-added), the orphan reaper leaves parked networks alone,
`orchestra cleanup` removes the idle ones, and ORCHESTRA_NETWORK_POOL=0 removes them all.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import make_task, run
from typer.testing import CliRunner

from orchestrator.cli import commands as cli
from orchestrator.host import netpool
from orchestrator.host.netpool import NetworkPool
from orchestrator.runtime import firewall
from orchestrator.runtime.fake import FakeRuntime

# parked pool networks are the host's, claimed by whichever job starts next
pytestmark = pytest.mark.exclusive


@pytest.fixture
def pool_dir(runtime, tmp_path, monkeypatch):
    """A pool of this test's own (the engine's folder in it): parked networks elsewhere on
    the host are not seen."""
    monkeypatch.setattr(netpool, "POOL_DIR", tmp_path / "pool")
    folder = netpool.pool_dir(runtime)
    yield folder
    for name in netpool.remove_idle(runtime):
        assert not (folder / name).exists()


def _rule_present(name: str, gateway: str) -> bool:
    return firewall.installed(name)


def _exists(runtime, name: str) -> bool:
    return runtime._exists(runtime.api.inspect_network, name)


def test_the_second_job_runs_on_the_first_jobs_network_and_nothing_of_either_job_is_left(
        runtime, tmp_path, pool_dir):
    task = make_task(tmp_path / "ds", "pooled", solve="touch /app/ok\n")
    _, first = run(runtime, task, tmp_path / "jobs", n=1, name="pool-one")
    _, second = run(runtime, task, tmp_path / "jobs", n=1, name="pool-two")
    assert [t.reward for t in first + second] == [{"reward": 1.0}] * 2
    name = first[0].limits.network
    assert name.startswith("orchestra-pool-") and second[0].limits.network == name
    assert second[0].limits.host_isolation == "iptables"
    assert runtime.labelled("orchestra.job=pool-one") == ([], [], [])
    assert runtime.labelled("orchestra.job=pool-two") == ([], [], [])
    info = runtime.api.inspect_network(name)  # parked: there, idle, locked by no one
    assert info["Containers"] == {} and info["Labels"]["orchestra.pool"] == "1"
    assert "orchestra.job" not in info["Labels"]
    assert (pool_dir / name).exists()


def test_a_network_held_by_a_live_job_is_never_handed_to_another(runtime, pool_dir):
    first, second = NetworkPool(runtime, "held-a"), NetworkPool(runtime, "held-b")
    try:
        a = first.acquire(internal=True)
        first_parks = NetworkPool(runtime, "held-c")
        parked = first_parks.acquire(internal=True)
        first_parks.close()  # one idle network in the pool, `a` still held
        b = second.acquire(internal=True)
        assert b.name == parked.name != a.name
        c = NetworkPool(runtime, "held-d")
        fresh = c.acquire(internal=True)  # both held: a new one
        assert fresh.name not in (a.name, b.name) and c.created == 1
        c.close()
    finally:
        first.close()
        second.close()


def test_a_claimed_network_whose_firewall_rule_is_gone_gets_it_back(runtime, pool_dir):
    maker = NetworkPool(runtime, "rule-a")
    network = maker.acquire(internal=False)
    maker.close()
    assert _rule_present(network.name, network.gateway)
    firewall.release(network.name, network.gateway)  # e.g. an iptables flush since
    assert not _rule_present(network.name, network.gateway)
    taker = NetworkPool(runtime, "rule-b")
    try:
        again = taker.acquire(internal=False)
        assert again.name == network.name and again.host_isolation == "iptables"
        assert _rule_present(network.name, network.gateway)
    finally:
        taker.close()


def test_a_parked_network_a_container_still_holds_is_not_claimed(runtime, pool_dir):
    from orchestrator.host.cleanup import owner_labels
    from orchestrator.runtime.base import ContainerSpec

    maker = NetworkPool(runtime, "busy-a")
    network = maker.acquire(internal=True)
    maker.close()
    container = runtime.create(ContainerSpec(
        image="orchestra/base:bookworm", name=f"{network.name}-squatter", command=["sleep", "60"], cpus=0.5, memory_mb=128, pids_limit=64,
        labels={"orchestra.job": "busy-squatter", **owner_labels()}, network=network.name))
    try:
        taker = NetworkPool(runtime, "busy-b")
        other = taker.acquire(internal=True)
        assert other.name != network.name
        taker.close()
    finally:
        runtime.remove(container)
        runtime.remove_network(network.name)


def test_cleanup_removes_idle_pool_networks_and_keeps_held_ones(runtime, pool_dir, tmp_path):
    idle_maker, holder = NetworkPool(runtime, "clean-a"), NetworkPool(runtime, "clean-b")
    idle = idle_maker.acquire(internal=True)
    held = holder.acquire(internal=True)
    idle_maker.close()
    try:
        dry = CliRunner().invoke(cli.app, ["cleanup", "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert idle.name in dry.output and held.name not in dry.output
        assert _exists(runtime, idle.name)
        done = CliRunner().invoke(cli.app, ["cleanup"])
        assert done.exit_code == 0, done.output
        assert not _exists(runtime, idle.name) and not (pool_dir / idle.name).exists()
        assert _exists(runtime, held.name)
        assert not _rule_present(idle.name, idle.gateway)
    finally:
        holder.close()
        netpool.remove_idle(runtime)
    assert not _exists(runtime, held.name)


def test_with_the_pool_off_a_job_removes_its_networks(runtime, tmp_path, pool_dir, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_NETWORK_POOL", "0")
    task = make_task(tmp_path / "ds", "unpooled", solve="touch /app/ok\n")
    _, trials = run(runtime, task, tmp_path / "jobs", n=1, name="pool-off")
    assert trials[0].reward == {"reward": 1.0}
    assert not _exists(runtime, trials[0].limits.network)
    assert list(pool_dir.iterdir()) == []


def test_ports_are_written_only_when_they_change_and_read_back_from_the_kernel(
        runtime, pool_dir, monkeypatch):
    """A trial that opens no port costs no iptables commit on a network whose chain is
    closed; one that opens ports has them read back, and closed again at release."""
    fills: list[list[int]] = []
    real_fill = firewall._fill
    monkeypatch.setattr(firewall, "_fill", lambda chain, gateway, ports: fills.append(list(ports))
                        or real_fill(chain, gateway, ports))
    pool = NetworkPool(runtime, "ports-a")
    try:
        network = pool.acquire(internal=False)
        assert fills == [[]]  # made: its chain written closed once
        assert runtime.open_host_ports(network, []) == [] and fills == [[]]
        pool.release(network)
        assert fills == [[]]  # nothing was open: nothing to close
        again = pool.acquire(internal=False)
        assert again is network
        assert runtime.open_host_ports(network, [5000, 4000, 5000]) == [4000, 5000]
        assert firewall.opened(network.name) == [4000, 5000] and fills == [[], [4000, 5000]]
        pool.release(network)
        assert firewall.opened(network.name) == [] and fills == [[], [4000, 5000], []]
        assert runtime.open_host_ports(network, []) == [] and len(fills) == 3
    finally:
        pool.close()
    claimer = NetworkPool(runtime, "ports-b")  # parked closed: claimed with nothing written
    try:
        claimed = claimer.acquire(internal=False)
        assert claimed.name == network.name and claimed.host_isolation == "iptables"
        assert len(fills) == 3 and firewall.installed(claimed.name)
        assert runtime.open_host_ports(claimed, [4321]) == [4321]
    finally:  # the job is killed: its lock goes with its process, the port stays open
        for _net, fd in claimer._held.values():
            os.close(fd)
        claimer._held.clear()
    taker = NetworkPool(runtime, "ports-c")
    try:
        again = taker.acquire(internal=False)
        assert again.name == network.name and firewall.opened(network.name) == []  # closed again
        assert fills[-1] == [] and len(fills) == 5
    finally:
        taker.close()


def test_the_pool_is_the_engines_a_job_on_another_runtime_leaves_its_networks(runtime, pool_dir):
    """The pool is keyed by the engine (its ID from `docker info`): a job on a FakeRuntime on
    this host neither claims nor drops a network parked on the real engine, which the next
    job on the engine claims."""
    engine_id = subprocess.run(["docker", "info", "--format", "{{.ID}}"], capture_output=True,
                               text=True, check=True).stdout.strip()
    assert runtime.engine_facts().engine_id == engine_id != ""
    parker = NetworkPool(runtime, "engine-a", keep=4)
    parked = parker.acquire(internal=True)
    parker.close()
    assert (pool_dir / parked.name).is_file() and pool_dir.parent == netpool.POOL_DIR

    fake = FakeRuntime()
    on_fake = NetworkPool(fake, "engine-fake", keep=4)
    own = on_fake.acquire(internal=True)
    assert (on_fake.claimed, on_fake.created) == (0, 1) and own.name != parked.name
    assert fake.calls.count("adopt_network") == 0  # the real engine's lock files never listed
    on_fake.close()
    assert netpool.remove_idle(fake) == [own.name]
    assert (pool_dir / parked.name).is_file() and _exists(runtime, parked.name)

    again = NetworkPool(runtime, "engine-b", keep=4)
    assert again.acquire(internal=True).name == parked.name and again.claimed == 1
    again.close()
