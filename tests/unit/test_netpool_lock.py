"""A new pool network's lock file is never seen unlocked: a job claiming from the pool at
that moment would lock it, find no network of that name (not made yet) and unlink it, and
the maker's trial would fail to start (seen once in tests/hostile's matrix)."""

from __future__ import annotations

import os

import pytest

from orchestrator.host import netpool
from orchestrator.host.netpool import NetworkPool
from orchestrator.runtime.fake import FakeRuntime


@pytest.fixture
def pool_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(netpool, "POOL_DIR", tmp_path / "networks")
    return tmp_path / "networks"


def test_the_lock_file_appears_already_locked_and_no_draft_is_left(pool_dir, monkeypatch):
    seen: list[int | None] = []
    real_link = os.link

    def link_then_claim(src, dst, *args, **kwargs):
        real_link(src, dst, *args, **kwargs)
        seen.append(netpool._try_lock(dst))  # a claimer, at the first moment

    monkeypatch.setattr(netpool.os, "link", link_then_claim)
    fd = netpool._new_lock(pool_dir / "orchestra-pool-pub-0123456789ab")
    try:
        assert seen == [None]  # the claimer could not lock it
        assert sorted(os.listdir(pool_dir)) == ["orchestra-pool-pub-0123456789ab"]
    finally:
        os.close(fd)
    again = netpool._try_lock(pool_dir / "orchestra-pool-pub-0123456789ab")  # the maker gone: claimable
    assert again is not None
    os.close(again)


def test_a_name_already_taken_is_refused_and_leaves_no_draft(pool_dir):
    fd = netpool._new_lock(pool_dir / "orchestra-pool-int-aaaaaaaaaaaa")
    with pytest.raises(FileExistsError):
        netpool._new_lock(pool_dir / "orchestra-pool-int-aaaaaaaaaaaa")
    assert os.listdir(pool_dir) == ["orchestra-pool-int-aaaaaaaaaaaa"]
    os.close(fd)


def test_the_pool_is_the_engines_a_job_on_another_engine_never_sees_its_networks(pool_dir):
    """Two engines (two FakeRuntimes) on one host: a network parked by a job on one is
    neither claimed nor dropped by a job on the other, whose own pool is a folder of its own;
    a later job on the first claims it (before the pool was keyed by engine, the second job
    locked the first's idle lock file, found no such network on its engine and unlinked it)."""
    real, fake = FakeRuntime(), FakeRuntime()
    parker = NetworkPool(real, "on-real", keep=4)
    parked = parker.acquire(internal=True)
    parker.close()  # idle in the first engine's pool
    real_lock = netpool.pool_dir(real) / parked.name
    assert real_lock.is_file() and netpool.pool_dir(real) != netpool.pool_dir(fake)

    other = NetworkPool(fake, "on-fake", keep=4)
    mine = other.acquire(internal=True)
    assert (other.claimed, other.created) == (0, 1) and mine.name != parked.name
    assert real_lock.is_file()  # not claimed, not dropped
    assert netpool.remove_idle(fake) == []  # its own held one is not idle, the other engine's not seen
    other.close()
    assert netpool.remove_idle(fake) == [mine.name] and real_lock.is_file()

    again = NetworkPool(real, "on-real-again", keep=4)
    assert again.acquire(internal=True).name == parked.name and again.claimed == 1
    again.close()
    assert sorted(p.name for p in pool_dir.iterdir()) == sorted(
        {netpool.pool_dir(real).name, netpool.pool_dir(fake).name})
