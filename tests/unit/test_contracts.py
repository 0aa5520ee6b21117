"""Manifests, rewards, archives and subnets without Docker."""

from __future__ import annotations

import io
import ipaddress
import tarfile

import pytest
from conftest import ROOT

from orchestrator.archive import safe_extract, tar_files
from orchestrator.errors import InputError
from orchestrator.models.manifest import load_manifest
from orchestrator.runtime.subnets import SubnetPool
from orchestrator.trial.bases import base_references
from orchestrator.trial.verify import RewardError, read_reward


def test_shipped_manifests_load_and_hash_stably():
    oracle = load_manifest(ROOT / "manifests/oracle.yaml")
    nop = load_manifest(ROOT / "manifests/nop.yaml")
    assert oracle.orchestrator.agent == "oracle" and nop.orchestrator.agent == "nop"
    assert oracle.condition_hash() == load_manifest(ROOT / "manifests/oracle.yaml").condition_hash()
    assert oracle.condition_hash() != nop.condition_hash()


@pytest.mark.parametrize("text, fragment", [
    ("roster: []\n", "exactly one member"),
    ("roster:\n  - {id: a, kind: orchestrator}\n  - {id: b, kind: orchestrator}\n", "exactly one"),
    ("roster:\n  - {id: a, kind: orchestrator, agent: gpt}\n", "roster.0.agent"),
    ("roster:\n  - {id: a, kind: orchestrator}\nextra: 1\n", "extra"),
    ("- just a list\n", "YAML mapping"),
    ("roster: [\n", "not valid YAML"),
])
def test_bad_manifests_name_the_field(tmp_path, text, fragment):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_manifest(path)
    assert str(path) in str(info.value) and fragment in str(info.value)


@pytest.mark.parametrize("name, content, expected", [
    ("reward.json", '{"reward": 0.5, "a": 1}', {"reward": 0.5, "a": 1.0}),
    ("reward.json", '{"score": 1}', {"score": 1.0}),
    ("reward.json", '{"correctness": 1, "performance": 0.5}', {"correctness": 1.0, "performance": 0.5}),
    ("reward.json", '{"reward": "1"}', {"reward": 1.0}),  # Harbor's lax float: strings, bools
    ("reward.json", '{"reward": true, "x": false}', {"reward": 1.0, "x": 0.0}),
    ("reward.txt", " 1\n", {"reward": 1.0}),
])
def test_rewards_are_read(tmp_path, name, content, expected):
    (tmp_path / name).write_text(content)
    assert read_reward(tmp_path) == expected


@pytest.mark.parametrize("name, content, fragment", [
    ("reward.json", "not json", "not JSON"),
    ("reward.json", "[1, 2]", "flat map"),
    ("reward.json", '{"reward": NaN}', "not finite"),
    ("reward.json", '{"reward": "lots"}', "not a number"),
    ("reward.json", '{"reward": null}', "not a number"),
    ("reward.json", '{"reward": [1]}', "not a number"),
    ("reward.json", '{"reward": {"a": 1}}', "not a number"),
    ("reward.json", '{"reward": ' + "9" * 400 + '}', "too large"),
    ("reward.txt", "one", "not one number"),
    ("reward.txt", "inf", "not finite"),
])
def test_bad_rewards_are_errors_with_a_reason(tmp_path, name, content, fragment):
    (tmp_path / name).write_text(content)
    with pytest.raises(RewardError, match=fragment):
        read_reward(tmp_path)


def test_no_reward_file_is_an_error(tmp_path):
    with pytest.raises(RewardError, match="neither"):
        read_reward(tmp_path)


def _hostile_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def add(name, data=b"x", kind=tarfile.REGTYPE, link=""):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
        add("out/ok.txt", b"fine")
        add("/etc/evil", b"abs")
        add("out/../../evil", b"dotdot")
        add("out/link", kind=tarfile.SYMTYPE, link="/etc/passwd")
        add("out/rel", kind=tarfile.SYMTYPE, link="../../../../etc")
        add("out/rel/owned", b"through the link")
        add("out/dev", kind=tarfile.CHRTYPE)
        add("out/big", b"y" * 5000)
    return buffer.getvalue()


def test_hostile_archives_write_nothing_outside_the_destination(tmp_path):
    dest = tmp_path / "dest"
    report = safe_extract([_hostile_tar()], dest, cap_bytes=1000, strip_prefix="out")
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    # the link itself is refused, so "rel/owned" lands in a plain folder inside dest
    assert written == ["dest", "dest/big", "dest/ok.txt", "dest/rel", "dest/rel/owned"]
    assert (dest / "big").stat().st_size == 1000 - len("fine") - len("through the link")  # cut at the cap
    assert not (tmp_path.parent / "evil").exists()
    assert (dest / "ok.txt").read_text() == "fine"
    assert not (dest / "link").exists() and not (dest / "link").is_symlink()
    assert report.truncated and report.files >= 1
    assert len(report.rejected) >= 5


def test_in_memory_tars_round_trip(tmp_path):
    data = tar_files({"a/b.txt": b"hi"}, dirs=["a", "c"])
    safe_extract([data], tmp_path)
    assert (tmp_path / "a/b.txt").read_bytes() == b"hi" and (tmp_path / "c").is_dir()


def test_subnet_pool_hands_out_small_disjoint_blocks_and_skips_used_ones():
    pool = SubnetPool("10.99.0.0/24", 28)
    used = ["10.99.0.0/28"]
    blocks = [pool.acquire(used) for _ in range(15)]
    assert len(set(blocks)) == 15
    assert ipaddress.ip_network("10.99.0.0/28") not in blocks
    with pytest.raises(RuntimeError, match="no free"):
        pool.acquire(used)
    pool.release(blocks[0])
    assert pool.acquire(used) == blocks[0]


def test_base_references_skip_stage_names():
    text = "FROM python:3.12-slim-bookworm AS build\nRUN x\nFROM build\nFROM --platform=linux/amd64 debian:bookworm\n"
    assert base_references(text) == ["python:3.12-slim-bookworm", "debian:bookworm"]


def test_the_headline_of_a_map_is_harbors_where_harbor_has_one():
    from orchestrator.models.result import headline_of

    assert headline_of({"reward": 0.25, "x": 1.0}) == 0.25
    assert headline_of({"score": 0.5}) == 0.5  # Harbor's CLI: the only value
    assert headline_of({"correctness": 1.0, "performance": 0.5}) == 0.75  # orchestra's: the mean
