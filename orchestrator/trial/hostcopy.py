"""Copies to and from a trial's loop disk on the host, without the engine (an archive copy
costs the engine ~60 ms; these cost a directory walk). Out: the tar stream `get_archive`
would give for a folder under /logs. In: `stage_tree`, a fresh folder of orchestra's files
(the verifier's tests) under /logs.

The agent may still be running services (shared mode) that swap files for links while we
read, so nothing here follows a link: every directory is opened relative to its parent's
descriptor with O_NOFOLLOW, every file with O_NOFOLLOW | O_NONBLOCK and checked with fstat
after opening (a FIFO never blocks us, a link is never read through). Links, FIFOs and
devices go into the stream as what they are, for `safe_extract` to reject as it does for the
engine's streams. Data is cut at the caps here (bounding the work), and `cut` says so;
members past the member cap (one past it is streamed, for safe_extract to see the cap) are
only counted, in `unlisted`.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


@dataclass
class HostTar:
    chunks: Generator[bytes, None, None]
    cut: bool = False  # some file's data was cut at a cap
    unlisted: int = 0  # members past the member cap: counted here, not in the stream


def host_tar(folder: Path, arcname: str, cap_bytes: int, file_cap_bytes: int | None,
             cap_entries: int) -> HostTar | None:
    """A tar of `folder` (members under `arcname`), or None when it does not exist."""
    try:
        top = os.open(folder, DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
    state = _Walk(cap_bytes, file_cap_bytes, cap_entries)
    try:
        with tarfile.open(fileobj=spool, mode="w") as archive:
            archive.addfile(_info(arcname, tarfile.DIRTYPE, os.fstat(top)))
            state.walk(archive, top, arcname)
    finally:
        os.close(top)
    spool.seek(0)

    def chunks() -> Generator[bytes, None, None]:
        try:
            while block := spool.read(1024 * 1024):
                yield block
        finally:
            spool.close()

    return HostTar(chunks(), state.cut, state.unlisted)


MAX_DEPTH = 100  # folders below this are left out and counted (two frames per level)


class _Walk:
    def __init__(self, cap_bytes: int, file_cap_bytes: int | None, cap_entries: int):
        self.room, self.file_cap, self.entries_left = cap_bytes, file_cap_bytes, cap_entries + 1
        self.cut = False
        self.unlisted = 0  # entries past the member cap, left out of the stream

    def walk(self, archive: tarfile.TarFile, dir_fd: int, prefix: str, depth: int = 0) -> None:
        """One folder's entries; a folder deeper than MAX_DEPTH is not entered (its entry is
        counted as unlisted): an agent's 1,000-level tree can never exhaust the stack."""
        if depth > MAX_DEPTH:
            self.unlisted += 1
            return
        for name in sorted(os.listdir(dir_fd)):
            path = f"{prefix}/{name}"
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if self.entries_left <= 0:  # past the member cap: counted, never read or written
                self.unlisted += 1
                if stat.S_ISDIR(info.st_mode):
                    self._directory(archive, dir_fd, name, path, listed=False, depth=depth)
                continue
            self.entries_left -= 1
            if stat.S_ISDIR(info.st_mode):
                self._directory(archive, dir_fd, name, path, listed=True, depth=depth)
            elif stat.S_ISREG(info.st_mode):
                self._file(archive, dir_fd, name, path)
            elif stat.S_ISLNK(info.st_mode):
                entry = _info(path, tarfile.SYMTYPE, info)
                try:
                    entry.linkname = os.readlink(name, dir_fd=dir_fd)
                except OSError:
                    continue
                archive.addfile(entry)
            else:  # FIFO, socket, device: named in the stream, never opened
                archive.addfile(_info(path, tarfile.FIFOTYPE, info))

    def _directory(self, archive: tarfile.TarFile, dir_fd: int, name: str, path: str,
                   listed: bool, depth: int = 0) -> None:
        """Its entry (when `listed`: within the member cap) and everything under it."""
        fd = _open_no_follow(archive if listed else None, dir_fd, name, path, DIR_FLAGS)
        if fd is None:
            return
        try:
            if listed:
                archive.addfile(_info(path, tarfile.DIRTYPE, os.fstat(fd)))
            self.walk(archive, fd, path, depth + 1)
        finally:
            os.close(fd)

    def _file(self, archive: tarfile.TarFile, dir_fd: int, name: str, path: str) -> None:
        fd = _open_no_follow(archive, dir_fd, name, path, FILE_FLAGS)
        if fd is None:
            return
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                archive.addfile(_info(path, tarfile.FIFOTYPE, info))
                return
            keep = min(info.st_size, max(self.room, 0), self.file_cap or info.st_size)
            self.cut = self.cut or keep < info.st_size
            self.room -= keep
            entry = _info(path, tarfile.REGTYPE, info)
            entry.size = keep
            archive.addfile(entry, fileobj=_Exactly(handle, keep))


def _open_no_follow(archive: tarfile.TarFile | None, dir_fd: int, name: str, path: str,
                    flags: int) -> int | None:
    """`name` opened under `dir_fd` without following a link, or None when it was swapped
    for a link (ELOOP) or is gone meanwhile: then named in `archive` as a link that leaves
    the folder (safe_extract rejects it), when an archive is given."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        if archive is not None:
            archive.addfile(_info(path, tarfile.SYMTYPE, None))
        return None


def _info(path: str, kind: bytes, info: os.stat_result | None) -> tarfile.TarInfo:
    entry = tarfile.TarInfo(path)
    entry.type = kind
    entry.mode = (info.st_mode & 0o7777) if info else 0o644
    entry.mtime = int(info.st_mtime) if info else 0
    if kind == tarfile.SYMTYPE and info is None:
        entry.linkname = "/"  # swapped while we read: kept out like any link leaving the folder
    return entry


class _Exactly:
    """`size` bytes of a file that may shrink while read (padded with zeros), streamed."""

    def __init__(self, handle: BinaryIO, size: int):
        self._handle, self._left = handle, size

    def read(self, size: int = -1) -> bytes:
        want = self._left if size < 0 else min(size, self._left)
        data = self._handle.read(want)
        data += b"\0" * (want - len(data))
        self._left -= want
        return data


def stage_tree(parent: Path, name: str, sources: list[Path]) -> None:
    """Create parent/name, a folder that must not exist yet, and copy each source folder
    into it in turn (later ones over earlier ones): regular files and folders only, never
    links or __pycache__, modes kept (what tar_directory ships). Every step is relative to
    a descriptor opened with O_NOFOLLOW, so a live agent process that swaps a folder here for
    a link cannot turn the copy into a write elsewhere on the host."""
    top = os.open(parent, DIR_FLAGS)
    try:
        os.mkdir(name, 0o755, dir_fd=top)
        into = os.open(name, DIR_FLAGS, dir_fd=top)
    finally:
        os.close(top)
    try:
        for source in sources:
            _copy_into(source, into)
    finally:
        os.close(into)


def _copy_into(source: Path, into: int) -> None:
    for entry in os.scandir(source):
        if entry.is_symlink() or entry.name == "__pycache__":
            continue
        if entry.is_dir():
            try:
                os.mkdir(entry.name, stat.S_IMODE(entry.stat().st_mode), dir_fd=into)
            except FileExistsError:
                pass  # an earlier source made it: merge
            child = os.open(entry.name, DIR_FLAGS, dir_fd=into)
            try:
                _copy_into(Path(entry.path), child)
            finally:
                os.close(child)
        elif entry.is_file():
            mode = stat.S_IMODE(entry.stat().st_mode)
            out = _new_file(entry.name, mode, into)
            with os.fdopen(out, "wb") as target, open(entry.path, "rb") as data:
                shutil.copyfileobj(data, target)
                os.fchmod(target.fileno(), mode)


def _new_file(name: str, mode: int, into: int) -> int:
    """A regular file this call creates (O_EXCL), never anything already at `name`: an
    earlier source's file (a step's tests overlaying the task's) or whatever a live agent
    process planted there (a FIFO would block a plain open forever, a link would redirect
    it) is unlinked first, without being opened. O_NONBLOCK: should anything still race in,
    the open fails instead of waiting."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK
    for _ in range(3):
        try:
            return os.open(name, flags, mode, dir_fd=into)
        except FileExistsError:
            try:
                os.unlink(name, dir_fd=into)
            except IsADirectoryError:
                shutil.rmtree(os.path.join(f"/proc/self/fd/{into}", name), ignore_errors=True)
            except FileNotFoundError:
                pass
    raise OSError(f"{name}: something keeps replacing it while the tests are staged")
