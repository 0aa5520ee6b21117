"""A new pool network's lock file is never seen unlocked: a job claiming from the pool at
that moment would lock it, find no network of that name (not made yet) and unlink it, and
the maker's trial would fail to start (seen once in tests/hostile's matrix)."""

from __future__ import annotations

import os

import pytest

from orchestrator.host import netpool


@pytest.fixture
def pool_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(netpool, "POOL_DIR", tmp_path / "networks")
    return tmp_path / "networks"


def test_the_lock_file_appears_already_locked_and_no_draft_is_left(pool_dir, monkeypatch):
    seen: list[int | None] = []
    real_link = os.link

    def link_then_claim(src, dst, *args, **kwargs):
        real_link(src, dst, *args, **kwargs)
        seen.append(netpool._try_lock(os.path.basename(dst)))  # a claimer, at the first moment

    monkeypatch.setattr(netpool.os, "link", link_then_claim)
    fd = netpool._new_lock("orchestra-pool-pub-0123456789ab")
    try:
        assert seen == [None]  # the claimer could not lock it
        assert sorted(os.listdir(pool_dir)) == ["orchestra-pool-pub-0123456789ab"]
    finally:
        os.close(fd)
    again = netpool._try_lock("orchestra-pool-pub-0123456789ab")  # the maker gone: claimable
    assert again is not None
    os.close(again)


def test_a_name_already_taken_is_refused_and_leaves_no_draft(pool_dir):
    fd = netpool._new_lock("orchestra-pool-int-aaaaaaaaaaaa")
    with pytest.raises(FileExistsError):
        netpool._new_lock("orchestra-pool-int-aaaaaaaaaaaa")
    assert os.listdir(pool_dir) == ["orchestra-pool-int-aaaaaaaaaaaa"]
    os.close(fd)
