"""`orchestra agents` measures each installed agent's folder (api/admin.py list_agents:
`size_bytes`, the CLI's "size on disk" column): the bytes `du -s -B1` counts (blocks, a
hard-linked file once, symbolic links not followed); "-" (None) when not installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.api import list_agents
from orchestrator.api.admin import _bytes_on_disk
from orchestrator.cli.admin import _size
from orchestrator.cli.commands import app


def du(folder: Path) -> int:
    return int(subprocess.run(["du", "-s", "-B1", str(folder)], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def test_a_folders_bytes_on_disk_are_what_du_counts(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    (folder / "lib" / "deep").mkdir(parents=True)
    (folder / "lib" / "big.bin").write_bytes(os.urandom(300_000))
    (folder / "lib" / "deep" / "small.txt").write_text("x")
    os.link(folder / "lib" / "big.bin", folder / "hard.bin")  # the same blocks: counted once
    outside = tmp_path / "outside.bin"
    outside.write_bytes(os.urandom(1_000_000))
    (folder / "link").symlink_to(outside)  # not followed
    measured = _bytes_on_disk(folder)
    assert measured == du(folder)
    assert measured is not None and 300_000 <= measured < 1_000_000  # the big file once, the outside one not
    assert _bytes_on_disk(tmp_path / "gone") is None


def test_list_agents_measures_installed_folders_and_leaves_the_rest_unmeasured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.agents import INSTALLED

    monkeypatch.setenv("ORCHESTRA_CACHE", str(tmp_path))  # an empty cache: nothing installed
    rows = {row.name: row for row in list_agents()}
    assert all(row.size_bytes is None for row in rows.values() if row.kind == "built-in")
    not_installed = [n for n in INSTALLED if not rows[n].installed]
    assert not_installed, "the cache was not redirected: every agent reads as installed"
    assert all(rows[n].size_bytes is None for n in not_installed)
    name = next(n for n in not_installed if len(INSTALLED[n].recipes()) == 1)  # one folder (no shared node)
    folder = Path(rows[name].path)
    folder.mkdir(parents=True)
    (folder / "bin").write_bytes(os.urandom(50_000))
    (folder / "installed.json").write_text("{}")
    row = next(r for r in list_agents() if r.name == name)
    assert row.installed is True and row.size_bytes == du(folder)


def test_the_cli_shows_the_size_or_a_dash() -> None:
    assert [_size(None), _size(512), _size(55_115_776), _size(1_907_548_160)] == [
        "-", "512 B", "55.1 MB", "1.9 GB"]
    out = CliRunner().invoke(app, ["agents"])
    assert out.exit_code == 0, out.output
    assert "size on disk" in out.output
    oracle = next(line for line in out.output.splitlines() if line.startswith("oracle"))
    assert oracle.rstrip().endswith("-")  # built in: no folder of its own
