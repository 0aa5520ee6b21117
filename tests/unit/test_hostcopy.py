"""Copy-out from a loop disk on the host: what a hostile agent leaves there is named, never
followed or opened."""

from __future__ import annotations

import io
import os
import tarfile

from orchestrator.archive import safe_extract
from orchestrator.hostcopy import host_tar


def test_files_and_folders_come_out_and_links_fifos_are_named_not_followed(tmp_path):
    logs = tmp_path / "disk" / "agent"
    (logs / "sub").mkdir(parents=True)
    (logs / "stdout.txt").write_text("hello\n")
    (logs / "sub" / "deep.txt").write_text("deep\n")
    secret = tmp_path / "host-secret"
    secret.write_text("TOP SECRET")
    (logs / "leak").symlink_to(secret)
    (logs / "leakdir").symlink_to(tmp_path)
    os.mkfifo(logs / "pipe")  # opening it would block: it must never be opened
    made = host_tar(logs, "agent", cap_bytes=10**6, file_cap_bytes=None, cap_entries=100)
    out = tmp_path / "out"
    report = safe_extract(made.chunks, out, strip_prefix="agent")
    assert (out / "stdout.txt").read_text() == "hello\n" and (out / "sub/deep.txt").read_text() == "deep\n"
    assert not (out / "leak").exists() and not (out / "leakdir").exists() and not (out / "pipe").exists()
    assert report.files == 2 and report.n_rejected == 3 and not made.cut
    assert "TOP SECRET" not in "".join(p.read_text() for p in out.rglob("*") if p.is_file())


def test_caps_cut_the_data_and_say_so(tmp_path):
    logs = tmp_path / "agent"
    logs.mkdir()
    (logs / "big.txt").write_bytes(b"x" * 5000)
    (logs / "small.txt").write_bytes(b"y" * 10)
    made = host_tar(logs, "agent", cap_bytes=10**6, file_cap_bytes=1000, cap_entries=100)
    report = safe_extract(made.chunks, tmp_path / "out", strip_prefix="agent")
    assert made.cut and (tmp_path / "out/big.txt").stat().st_size == 1000 and report.files == 2
    assert host_tar(tmp_path / "missing", "agent", 10, None, 10) is None


def test_members_past_the_cap_are_counted_not_streamed(tmp_path):
    logs = tmp_path / "artifacts"
    (logs / "d").mkdir(parents=True)
    for i in range(30):
        (logs / "d" / f"f{i:02d}").write_text("x")
    made = host_tar(logs, "artifacts", cap_bytes=10**6, file_cap_bytes=None, cap_entries=10)
    report = safe_extract(made.chunks, tmp_path / "out", strip_prefix="artifacts", cap_files=10)
    whole = io.BytesIO()  # the whole folder in one stream, as the engine gives it
    with tarfile.open(fileobj=whole, mode="w") as archive:
        archive.add(logs, "artifacts")
    engine = safe_extract([whole.getvalue()], tmp_path / "engine", strip_prefix="artifacts", cap_files=10)
    assert (report.files, report.skipped + made.unlisted) == (engine.files, engine.skipped) == (8, 22)
    assert report.truncated and made.unlisted == 20
