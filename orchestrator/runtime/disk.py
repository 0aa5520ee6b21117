"""Disk quotas where the engine has no storage_opt (overlay2 on ext4, checked here).

A trial gets a sparse ext4 image of `storage_mb`, loop-mounted on the host; its `work` and
`logs` folders become the container's workdir and /logs (Docker copies the image's
workdir content into the empty volume on first mount). Writes there stop with ENOSPC at
the quota. The rest of the container filesystem is held by the writable-layer watchdog
(host/watchdog.py), which kills a trial whose layer passes the same quota.

Needs root (mount) and an engine on this host (its bind mounts are this host's paths).
Without them trials fall back to the watchdog alone, and the result records which
enforcement was used. Phases reach these disks only through the runtime
(`Runtime.loop_disks()`: a `LoopDisks`, or None), never by importing this module.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from orchestrator.log import get_logger
from orchestrator.runtime.base import DiskQuotas, LoopDisk

log = get_logger()

DISK_ROOT = Path(os.environ.get("ORCHESTRA_DISK_ROOT", "/var/tmp/orchestra-disks"))


def loop_disks_available() -> bool:
    return os.geteuid() == 0 and shutil.which("mkfs.ext4") is not None and Path(
        "/dev/loop-control"
    ).exists()


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def _job_key(job: str) -> str:
    return hashlib.sha256(job.encode()).hexdigest()[:16]


def _own_group(job: str) -> Path:
    """This process's disks of a job: two jobs of one name (other --jobs-dir folders, other
    processes) never share a folder, so one's clean-up never unmounts the other's disks."""
    return DISK_ROOT / f"{_job_key(job)}-{os.getpid()}"


def _groups(job: str) -> list[Path]:
    """Every process's disks of a job (`orchestra cleanup --job NAME`)."""
    if not DISK_ROOT.is_dir():
        return []
    key = _job_key(job)
    return [g for g in DISK_ROOT.iterdir() if g.name == key or g.name.startswith(key + "-")]


def _create_loop_disk(job: str, name: str, size_mb: int) -> LoopDisk:
    group = _own_group(job)
    base = group / name
    base.mkdir(parents=True, exist_ok=True)
    (group / "owner.pid").write_text(str(os.getpid()))
    disk = LoopDisk(image=base / "disk.img", mountpoint=base / "mnt")
    disk.mountpoint.mkdir(exist_ok=True)
    with open(disk.image, "wb") as handle:
        handle.truncate(size_mb * 1024 * 1024)
    try:
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E",
             "lazy_itable_init=1,lazy_journal_init=1", str(disk.image))
        _run("mount", "-o", "loop,nosuid,nodev", str(disk.image), str(disk.mountpoint))
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(base, ignore_errors=True)
        raise OSError(f"loop disk failed: {exc.stderr.decode(errors='replace').strip()}") from exc
    disk.work.mkdir()
    disk.logs.mkdir()
    return disk


def _remove_loop_disk(disk: LoopDisk) -> None:
    if os.path.ismount(disk.mountpoint):
        result = subprocess.run(["umount", str(disk.mountpoint)], capture_output=True)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", str(disk.mountpoint)], capture_output=True)
    shutil.rmtree(disk.image.parent, ignore_errors=True)


def _mounted_disks(job: str, own: bool = True) -> list[str]:
    """Loop disks of one job still mounted (what clean-up failed to remove): this
    process's, or with own=False every process's."""
    groups = [_own_group(job)] if own else _groups(job)
    return [str(base.name) for group in groups if group.is_dir()
            for base in group.iterdir() if os.path.ismount(base / "mnt")]


def _reap_loop_disks(job: str | None = None, own: bool = False) -> int:
    """Unmount and delete disks left behind by one job (this process's with own=True, else
    every process's), or, with None, by every job."""
    removed = 0
    if job is not None:
        groups = [_own_group(job)] if own else _groups(job)
    else:
        groups = list(DISK_ROOT.iterdir()) if DISK_ROOT.is_dir() else []
    for group in groups:
        removed += _remove_group(group)
    return removed


def _remove_group(group: Path) -> int:
    """Unmount and delete every disk of one job's folder, then the folder."""
    if not group.is_dir():
        return 0
    removed = 0
    for base in group.iterdir():
        if base.is_dir():
            _remove_loop_disk(LoopDisk(image=base / "disk.img", mountpoint=base / "mnt"))
            removed += 1
    shutil.rmtree(group, ignore_errors=True)
    return removed


def _reap_dead_owner_disks(alive: Callable[[int], bool]) -> int:
    """Disks of jobs whose owning process (owner.pid) is gone."""
    removed = 0
    if not DISK_ROOT.is_dir():
        return 0
    for group in DISK_ROOT.iterdir():
        try:
            pid = int((group / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not alive(pid):
            removed += _remove_group(group)
    return removed


class LoopDisks(DiskQuotas):
    """This host's loop disks, as a runtime whose engine shares the host offers them."""

    def create(self, job: str, name: str, size_mb: int) -> LoopDisk:
        return _create_loop_disk(job, name, size_mb)

    def remove(self, disk: LoopDisk) -> None:
        _remove_loop_disk(disk)

    def mounted(self, job: str, own: bool = True) -> list[str]:
        return _mounted_disks(job, own)

    def reap(self, job: str | None = None, own: bool = False) -> int:
        return _reap_loop_disks(job, own)

    def reap_dead_owners(self, alive: Callable[[int], bool]) -> int:
        return _reap_dead_owner_disks(alive)
