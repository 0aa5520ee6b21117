"""Tar archives in and out of containers. Archives coming out are hostile input.

Extraction refuses absolute paths, `..`, links that point outside the destination, device
files, and stops at a byte cap; everything it writes stays under the destination folder.
"""

from __future__ import annotations

import errno
import io
import os
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

DEFAULT_CAP_BYTES = 256 * 1024 * 1024
DEFAULT_CAP_FILES = 20_000  # members per extraction: 200,000 tiny files must not cost minutes
MAX_NAME_BYTES = 1024  # longer member names are rejected, never handed to the host filesystem


@dataclass
class ExtractReport:
    files: int = 0
    bytes: int = 0
    rejected: list[str] = field(default_factory=list)
    truncated: bool = False
    skipped: int = 0  # members past the file cap (counted, not written)
    n_rejected: int = 0  # all rejections; `rejected` keeps the first 200 reasons

    def reject(self, reason: str) -> None:
        self.n_rejected += 1
        if len(self.rejected) < 200:
            self.rejected.append(reason)


class _StreamReader(io.RawIOBase):
    """A file-like view of a chunk iterator (an engine or host copy-out), for tarfile's
    stream mode."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        with memoryview(buffer) as target:  # io passes a bytearray or a memoryview of bytes
            size = min(len(target), len(self._buffer))
            target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


def _inside(root: Path, candidate: Path) -> bool:
    return os.path.commonpath([root, candidate]) == str(root)


def safe_extract(chunks: Iterable[bytes], dest: Path, cap_bytes: int = DEFAULT_CAP_BYTES,
                 strip_prefix: str = "", file_cap_bytes: int | None = None,
                 cap_files: int = DEFAULT_CAP_FILES) -> ExtractReport:
    """Extract a tar stream under dest, treating every member as hostile. Files past the
    byte cap are cut (or skipped once the cap is spent); `file_cap_bytes` bounds each file;
    after `cap_files` members the rest are counted, not written. A member the host cannot
    write (a name too long, an invalid name) is rejected alone; only a full host disk
    (ENOSPC) stops the extraction, as an error of the host."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    report = ExtractReport()
    seen = 0
    with tarfile.open(fileobj=_StreamReader(iter(chunks)), mode="r|") as archive:
        for member in archive:
            seen += 1
            if seen > cap_files:
                report.truncated = True
                report.reject(f"{member.name[:200]}: over the {cap_files} file cap")
                report.skipped += 1
                continue
            if len(member.name.encode()) > MAX_NAME_BYTES or any(
                    len(part.encode()) > 255 for part in member.name.split("/")):
                report.reject(f"{member.name[:80]}...: name too long "
                                       f"({len(member.name)} characters)")
                continue
            try:
                _extract_member(archive, member, root, strip_prefix, cap_bytes,
                                file_cap_bytes, report)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise
                report.reject(f"{member.name[:200]}: cannot be written here "
                                       f"({exc.strerror or exc})")
    return report


def _extract_member(archive: tarfile.TarFile, member: tarfile.TarInfo, root: Path,
                    strip_prefix: str, cap_bytes: int, file_cap_bytes: int | None,
                    report: ExtractReport) -> None:
    name = member.name
    if strip_prefix and (name == strip_prefix or name.startswith(strip_prefix + "/")):
        name = name[len(strip_prefix):].lstrip("/")
    if not name:
        return
    if name.startswith("/") or ".." in Path(name).parts:
        report.reject(f"{member.name}: absolute or '..' path")
        return
    target = (root / name)
    if not _inside(root, target.parent.resolve()):
        report.reject(f"{member.name}: parent escapes via a link")
        return
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    if member.issym() or member.islnk():
        link = (target.parent / member.linkname) if member.issym() else root / member.linkname
        if member.linkname.startswith("/") or not _inside(root, Path(os.path.normpath(link))):
            report.reject(f"{member.name}: link to {member.linkname} leaves the folder")
            return
        report.reject(f"{member.name}: link kept out (links are not copied)")
        return
    if not member.isfile():
        report.reject(f"{member.name}: not a regular file")
        return
    room = cap_bytes - report.bytes
    if room <= 0:
        report.truncated = True
        report.reject(f"{member.name}: over the {cap_bytes} byte cap")
        return
    keep = min(member.size, room, file_cap_bytes or room)
    if keep < member.size:
        report.truncated = True
        report.reject(f"{member.name}: cut to {keep} of {member.size} bytes (cap)")
    source = archive.extractfile(member)
    assert source is not None  # a regular file (checked above) always has its data
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink():
        target.unlink()
    with open(target, "wb") as out:
        left = keep
        while left > 0 and (chunk := source.read(min(1024 * 1024, left))):
            out.write(chunk)
            left -= len(chunk)
    os.chmod(target, 0o644 | (0o111 if member.mode & 0o100 else 0))
    report.files += 1
    report.bytes += keep


def tar_directory(source: Path, arcname: str = ".", mode: int | None = None) -> bytes:
    """Tar a host folder (regular files and folders only, never links), in memory: for
    small folders orchestra ships (tasks, tests, the agent stack)."""
    buffer = io.BytesIO()
    _tar_into(buffer, source, arcname, mode)
    return buffer.getvalue()


def spool_directories(trees: list[tuple[Path, str]], dirs: Iterable[str] = ()) -> BinaryIO:
    """Tar folders the agent filled (artifacts: up to the collect caps) and orchestra's own
    ((source, arcname); later ones over earlier ones), plus empty `dirs`, into one unnamed
    temporary file, rewound: streamed to the engine, never held in memory whole, and one
    copy into a container instead of one each (an archive copy costs the engine ~50 ms)."""
    spool = tempfile.TemporaryFile()
    with tarfile.open(fileobj=spool, mode="w") as archive:
        _add_dirs(archive, dirs)
        for source, arcname in trees:
            _add_tree(archive, source, arcname, None)
    spool.seek(0)
    return spool


def spool_tree(source: Path, files: dict[str, bytes] | None = None) -> BinaryIO:
    """A task folder as a tar in an unnamed temporary file, rewound (a build context): the
    files are streamed from disk, never held in memory whole (a 1 GiB data file costs no
    1 GiB), links and __pycache__ left out as by tar_directory; `files` ({relative path:
    content}) replace the folder's members of the same name or are added."""
    files = files or {}
    spool = tempfile.TemporaryFile()
    with tarfile.open(fileobj=spool, mode="w") as archive:
        _add_tree(archive, source, ".", None, skip={f"./{name}" for name in files})
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o644
            archive.addfile(info, io.BytesIO(content))
    spool.seek(0)
    return spool


def _add_dirs(archive: tarfile.TarFile, dirs: Iterable[str]) -> None:
    """Empty folders, open to every user (the agent and the verifier may not be root)."""
    for name in dirs:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, 0o777
        archive.addfile(info)


def _tar_into(target: BinaryIO, source: Path, arcname: str, mode: int | None) -> None:
    with tarfile.open(fileobj=target, mode="w") as archive:
        _add_tree(archive, source, arcname, mode)


def _add_tree(archive: tarfile.TarFile, source: Path, arcname: str, mode: int | None,
              skip: set[str] | frozenset[str] = frozenset()) -> None:
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if info.issym() or info.islnk() or not (info.isfile() or info.isdir()):
            return None
        if info.name in skip:
            return None
        if "__pycache__" in info.name.split("/"):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if mode is not None and info.isfile():
            info.mode = mode | (info.mode & 0o111)
        return info
    archive.add(str(source), arcname=arcname, filter=keep)


def tar_files(files: dict[str, bytes], dirs: Iterable[str] = (), mode: int = 0o644) -> bytes:
    """Tar in-memory files: {relative path: content}; `dirs` are created empty."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        _add_dirs(archive, dirs)
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = mode
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()
