"""The real `mem` CLI (agent stack) against a real relay on loopback."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest
from conftest import ROOT

from orchestrator.services.relay.server import RelayServer
from orchestrator.services.relay.store import RelayStore

MEM = ROOT / "images/agent-stack/bin/mem"


@pytest.fixture()
def mem():
    store = RelayStore("ch")
    lead = store.add_identity("lead", "orchestrator")
    server = RelayServer(store, "127.0.0.1", secrets.token_bytes(32)).start()
    env = {**os.environ, "ORCHESTRA_RELAY_URL": server.url, "ORCHESTRA_PRIVATE_KEY": lead.private_key,
           "ORCHESTRA_AUTH_TAG": server.tag_for(lead), "ORCHESTRA_CHANNEL_ID": "ch"}

    def run(*args: str, stdin: bytes | str = b"") -> subprocess.CompletedProcess:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        return subprocess.run([sys.executable, str(MEM), *args], input=data, capture_output=True,
                              env=env, timeout=30)

    run.store, run.lead = store, lead
    yield run
    server.stop()


def test_set_get_hash_ls_and_normalisation(mem):
    assert mem("set", " Notes/Today ", "hello").returncode == 0
    assert mem("get", "mem/notes/today").stdout == b"hello"
    assert mem("get", "NOTES/today").stdout == b"hello"
    import hashlib
    assert mem("hash", "notes/today").stdout.decode().strip() == hashlib.sha256(b"hello").hexdigest()
    listing = mem("ls").stdout.decode()
    assert "mem/notes/today\t5 bytes" in listing
    assert '"slug": "mem/notes/today"' in mem("ls", "--json").stdout.decode()


@pytest.mark.parametrize("slug", ["core", "mem/core", "-bad", "a//b", "has space", "x" * 65,
                                  "a/" * 130 + "a", "UPPER!"])
def test_bad_slugs_are_usage_errors(mem, slug):
    proc = mem("set", slug, "v")
    assert proc.returncode == 2 and b"usage error" in proc.stderr
    assert mem.store.engrams == []


def test_the_value_cap_is_65535_bytes_and_an_oversize_write_leaves_the_value(mem):
    assert mem("set", "big", "-", stdin=b"a" * 65535).returncode == 0
    proc = mem("set", "big", "-", stdin=b"b" * 65536)
    assert proc.returncode == 2 and b"65535" in proc.stderr
    assert mem("get", "big").stdout == b"a" * 65535
    assert mem("set", "big", "c" * 65536).returncode == 2


def test_empty_values_need_allow_empty(mem):
    proc = mem("set", "e", "-", stdin=b"")
    assert proc.returncode == 2 and b"--allow-empty" in proc.stderr
    assert mem("set", "e", "", "--allow-empty").returncode == 0
    assert mem("get", "e").returncode == 0 and mem("get", "e").stdout == b""


def test_a_duplicate_write_is_a_conflict(mem):
    assert mem("set", "d", "same").returncode == 0
    proc = mem("set", "d", "same")
    assert proc.returncode == 3 and b"conflict" in proc.stderr


def test_write_times_are_monotonic_and_newest_wins(mem):
    for value in ("one", "two", "three"):
        assert mem("set", "lww", value).returncode == 0
    times = [e.created_at for e in mem.store.engrams]
    assert times == sorted(times) and len(set(times)) == 3  # max(now, head + 1)
    assert mem("get", "lww").stdout == b"three"


def test_ties_go_to_the_lowest_event_id():
    from orchestrator.services.relay.store import EngramEvent
    store = RelayStore("ch")
    owner = store.add_identity("lead", "orchestrator")
    store.import_events([EngramEvent("bbb", owner.pubkey, "mem/t", "from-b", 100, ""),
                         EngramEvent("aaa", owner.pubkey, "mem/t", "from-a", 100, "")])
    assert store.engram(owner, "t").value == "from-a"


def test_rm_writes_a_tombstone(mem):
    mem("set", "gone", "v")
    assert mem("rm", "gone").returncode == 0
    assert mem("get", "gone").returncode == 1
    assert "gone" not in mem("ls").stdout.decode()
    assert [e.value for e in mem.store.engrams] == ["v", None]
    assert mem("rm", "gone").returncode == 1  # nothing left to remove
    assert mem("set", "gone", "back").returncode == 0 and mem("get", "gone").stdout == b"back"


DIFF = "--- a\n+++ b\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"


def test_patch_applies_a_strict_unified_diff(mem):
    mem("set", "p", "one\ntwo\nthree\n")
    h = mem("hash", "p").stdout.decode().strip()
    proc = mem("patch", "p", "--base-hash", h, stdin=DIFF)
    assert proc.returncode == 0, proc.stderr
    assert mem("get", "p").stdout == b"one\nTWO\nthree\n"


@pytest.mark.parametrize("args, diff, fragment", [
    (["--no-base-hash"], "--- a\n+++ b\n@@ -1,1 +1,1 @@\n-one\n+one\n", b"no-op"),
    (["--no-base-hash"], DIFF + "--- c\n+++ d\n@@ -1 +1 @@\n-x\n+y\n", b"multi-file"),
    (["--no-base-hash"], "--- a\n+++ b\n@@ -2,3 +2,3 @@\n one\n-two\n+TWO\n three\n", b"does not apply"),
    (["--base-hash", "0" * 64], DIFF, b"base hash"),
    ([], DIFF, b"usage error"),  # neither --base-hash nor --no-base-hash
])
def test_patch_refusals_leave_the_value(mem, args, diff, fragment):
    mem("set", "p", "one\ntwo\nthree\n")
    proc = mem("patch", "p", *args, stdin=diff)
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr
    assert mem("get", "p").stdout == b"one\ntwo\nthree\n"


def test_no_relay_configured_is_a_usage_error():
    proc = subprocess.run([sys.executable, str(MEM), "ls"], capture_output=True,
                          env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 2 and b"ORCHESTRA_RELAY_URL" in proc.stderr
