"""One writer per job folder (DESIGN 4): `orchestra run` (a fresh job or `--resume`) holds
an exclusive lock on the folder for the whole run; a second run on the same folder is
refused at once (exit 2) naming the job and the holder's pid. The lock is the kernel's
(filelock's flock on JOB/.orchestra-run.lock), so a killed holder leaves nothing held; the
pid is written beside it, for the message only."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from orchestrator.errors import InputError

LOCK_NAME = ".orchestra-run.lock"
PID_NAME = ".orchestra-run.pid"


@contextlib.contextmanager
def hold_job(job_dir: Path) -> Iterator[None]:
    """The job folder's lock, held while the block runs; InputError when another holds it."""
    from filelock import FileLock, Timeout

    job_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(job_dir / LOCK_NAME, thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise InputError(f"{job_dir}: job {job_dir.name!r} is being run by another orchestra "
                         f"(pid {holder(job_dir)}); one writer per job: wait for it, or stop "
                         "it (its trials are then cancelled and this --resume goes on)") from None
    try:
        (job_dir / PID_NAME).write_text(f"{os.getpid()}\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            (job_dir / PID_NAME).unlink()
        lock.release()


def holder(job_dir: Path) -> str:
    """The pid the lock's holder wrote (it may be a moment late: 'unknown')."""
    try:
        return (job_dir / PID_NAME).read_text().strip() or "unknown"
    except OSError:
        return "unknown"
