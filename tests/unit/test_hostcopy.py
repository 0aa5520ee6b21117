"""Copies to and from a loop disk on the host: what a hostile agent leaves there is named,
never followed or opened, and never written through."""

from __future__ import annotations

import io
import os
import stat
import tarfile

import pytest

from orchestrator.archive import safe_extract
from orchestrator.trial.hostcopy import host_tar, stage_tree


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


def _tests_folders(tmp_path):
    first, second = tmp_path / "tests", tmp_path / "step-tests"
    (first / "lib").mkdir(parents=True)
    (first / "test.sh").write_text("echo task\n")
    (first / "test.sh").chmod(0o755)
    (first / "lib" / "check.py").write_text("print(1)\n")
    (first / "__pycache__").mkdir()
    (first / "__pycache__" / "x.pyc").write_bytes(b"junk")
    (first / "link").symlink_to("/etc/passwd")
    second.mkdir()
    (second / "test.sh").write_text("echo step\n")
    return first, second


def test_staged_tests_are_the_sources_merged_in_order_without_links_or_caches(tmp_path):
    first, second = _tests_folders(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    stage_tree(logs, ".orchestra-tests-ab", [first, second])
    staged = logs / ".orchestra-tests-ab"
    assert (staged / "test.sh").read_text() == "echo step\n"  # the step's own wins
    assert (staged / "lib" / "check.py").read_text() == "print(1)\n"
    assert not (staged / "link").exists() and not (staged / "link").is_symlink()
    assert not (staged / "__pycache__").exists()
    assert stat.S_IMODE((first / "test.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((staged / "lib" / "check.py").stat().st_mode) == stat.S_IMODE(
        (first / "lib" / "check.py").stat().st_mode)


def test_staging_never_writes_through_a_link_the_agent_planted(tmp_path):
    first, _ = _tests_folders(tmp_path)
    logs, outside = tmp_path / "logs", tmp_path / "host-folder"
    logs.mkdir()
    outside.mkdir()
    (logs / ".orchestra-tests-ab").symlink_to(outside)  # the name, planted as a link
    with pytest.raises(FileExistsError):
        stage_tree(logs, ".orchestra-tests-ab", [first])
    linked_logs = tmp_path / "linked-logs"
    linked_logs.symlink_to(outside)  # /logs itself a link: refused, not followed
    with pytest.raises(OSError):
        stage_tree(linked_logs, ".orchestra-tests-cd", [first])
    assert list(outside.iterdir()) == []


def test_a_thousand_level_tree_is_walked_without_recursion_errors_and_the_deep_part_counted(tmp_path):
    """Issue 26: a 1,000-level folder in /logs/artifacts raised RecursionError (retried as
    infra). The walk stops at MAX_DEPTH, counts what it left out, and the rest comes out."""
    from orchestrator.trial.hostcopy import MAX_DEPTH

    logs = tmp_path / "disk" / "artifacts"
    logs.mkdir(parents=True)
    (logs / "normal.txt").write_text("fine\n")
    fd = os.open(logs, os.O_RDONLY)
    for _ in range(1000):  # by fd: the path would pass PATH_MAX long before 1,000 levels
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    try:
        made = host_tar(logs, "artifacts", cap_bytes=10**6, file_cap_bytes=None, cap_entries=10_000)
        out = tmp_path / "out"
        report = safe_extract(made.chunks, out, strip_prefix="artifacts")
    finally:
        _remove_deep(logs)  # shutil.rmtree (pytest's own clean-up) recurses: it would fail
    assert (out / "normal.txt").read_text() == "fine\n" and report.files == 1
    assert made.unlisted == 1  # the folder below MAX_DEPTH, not entered
    depth = max(len(p.relative_to(out).parts) for p in out.rglob("*"))
    assert MAX_DEPTH <= depth <= MAX_DEPTH + 2


def _remove_deep(folder) -> None:
    """Remove a chain of nested `d` folders bottom-up without recursion."""
    fds = [os.open(folder, os.O_RDONLY)]
    while "d" in os.listdir(fds[-1]):
        fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
    while len(fds) > 1:
        os.close(fds.pop())
        os.rmdir("d", dir_fd=fds[-1])
    os.close(fds[0])


def test_staging_over_a_planted_fifo_never_blocks_and_writes_a_regular_file(tmp_path):
    """Issue 26: a live agent process that planted a FIFO where a staged test goes blocked
    the grading thread (a plain open for writing waits for a reader)."""
    import signal

    from orchestrator.trial.hostcopy import _copy_into

    source = tmp_path / "tests"
    source.mkdir()
    (source / "test.sh").write_text("echo graded\n")
    staged = tmp_path / "staged"
    staged.mkdir()
    os.mkfifo(staged / "test.sh")
    fd = os.open(staged, os.O_RDONLY)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("staging blocked on the FIFO"))
    signal.alarm(5)
    try:
        _copy_into(source, fd)
    finally:
        signal.alarm(0)
        os.close(fd)
    assert stat.S_ISREG(os.lstat(staged / "test.sh").st_mode)
    assert (staged / "test.sh").read_text() == "echo graded\n"
