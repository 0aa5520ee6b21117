"""One writer per job folder (DESIGN 4): `orchestra run` (a fresh job or `--resume`) holds
an exclusive lock on the folder for the whole run; a second run on the same folder is
refused at once (exit 2) naming the job and the holder's pid. The lock is the kernel's
(flock on JOB/.orchestra-run.lock), so a killed holder leaves nothing held; the pid is
written beside it, for the message only. Both are opened without following a link (a job
folder made elsewhere is input): a link there is refused naming it (exit 2)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from orchestrator.errors import InputError
from orchestrator.util import open_no_link

LOCK_NAME = ".orchestra-run.lock"
PID_NAME = ".orchestra-run.pid"


@contextlib.contextmanager
def hold_job(job_dir: Path) -> Iterator[None]:
    """The job folder's lock, held while the block runs; InputError when another holds it
    or when the lock or pid file is a link."""
    job_dir.mkdir(parents=True, exist_ok=True)
    fd = open_no_link(job_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"{job_dir}: job {job_dir.name!r} is being run by another orchestra "
                             f"(pid {holder(job_dir)}); one writer per job: wait for it, or stop "
                             "it (its trials are then cancelled and this --resume goes on)") from None
        pid = open_no_link(job_dir / PID_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(pid, "w") as handle:
            handle.write(f"{os.getpid()}\n")
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                (job_dir / PID_NAME).unlink()
    finally:
        os.close(fd)  # the flock goes with it


def holder(job_dir: Path) -> str:
    """The pid the lock's holder wrote (it may be a moment late: 'unknown'); never read
    through a link."""
    try:
        fd = open_no_link(job_dir / PID_NAME, os.O_RDONLY)
    except (OSError, InputError):
        return "unknown"
    with os.fdopen(fd, "rb") as handle:
        return handle.read(32).decode(errors="replace").strip() or "unknown"
