"""Two test workers on one Docker engine: who may run beside whom.

`make test` runs the suite in two worker processes (pytest-xdist, `-n 2 --dist loadfile`:
each test file whole on one worker) because it waits on the engine far more than it
computes (one worker keeps this 2-core host ~30% busy). Two orchestra jobs on one engine
is also what users do, so most tests run beside another test's job unchanged.

A test file that changes what the whole engine holds (restarts dockerd, removes or
re-tags shared base images, prunes, shares pool networks across jobs, runs a Ray cluster)
says so with `pytestmark = pytest.mark.exclusive`; one test alone may say it with
`@pytest.mark.exclusive`. An exclusive file or test runs with no other test running; every
other engine test file runs under a shared hold. The holds are one flock(2) per run of the
suite (a readers-writer lock with a turnstile, so an exclusive waiter is not starved by a
stream of shared holders). Without xdist nothing is contended and the locks cost nothing.

Order (`pytest_collection_modifyitems`, with `make test`'s `--no-loadscope-reorder`): the
files that are exclusive whole run first, then the other engine files, then the unit
tests. A worker's shared hold lasts its whole file, so an exclusive file that comes up while
the other worker is mid-file waits out the rest of that file with both workers' time lost;
run back to back at the start, the exclusive files wait only for each other (the first
clean-clone timings are in ARCHITECTURE.md, after the folder layout). A test that must be
alone is best a file of its own: one exclusive test in a shared file trades holds mid-file.

`foreign(labels)` tells the "nothing left behind" checks (conftest.py) which objects belong
to another worker's job still running, so they are not counted as this test's leftovers;
under an exclusive hold nothing is foreign, and the checks see the whole engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ENGINE_FOLDERS = ("integration", "hostile", "ray")


class _Hold:
    """This worker's hold on the engine: None, "shared" or "exclusive" (one at a time)."""

    def __init__(self) -> None:
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
        self.active = bool(run)  # alone (no xdist): nothing to share with
        base = Path(tempfile.gettempdir()) / f"orchestra-tests-{run or 'solo'}"
        self._paths = (base.with_suffix(".turnstile"), base.with_suffix(".engine"))
        self._fds: tuple[int, int] | None = None
        self.state: str | None = None

    def _open(self) -> tuple[int, int]:
        if self._fds is None:
            self._fds = tuple(os.open(p, os.O_RDWR | os.O_CREAT, 0o600) for p in self._paths)  # type: ignore[assignment]
        return self._fds  # type: ignore[return-value]

    def take(self, state: str) -> None:
        assert self.state is None, f"hold already {self.state}"
        if self.active:
            turnstile, engine = self._open()
            fcntl.flock(turnstile, fcntl.LOCK_EX)  # an exclusive waiter holds it: new shared ones queue
            try:
                fcntl.flock(engine, fcntl.LOCK_EX if state == "exclusive" else fcntl.LOCK_SH)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        self.state = state

    def release(self) -> None:
        if self.active and self.state is not None:
            fcntl.flock(self._open()[1], fcntl.LOCK_UN)
        self.state = None


HOLD = _Hold()


def _engine_module(node: pytest.Item | pytest.Collector) -> bool:
    return Path(str(node.fspath)).parent.name in ENGINE_FOLDERS


@pytest.fixture(scope="module", autouse=True)
def _engine_hold(request: pytest.FixtureRequest) -> Iterator[None]:
    """The file's hold, taken before any of its fixtures and released after them all."""
    if not _engine_module(request.node):
        yield
        return
    HOLD.take("exclusive" if request.node.get_closest_marker("exclusive") else "shared")
    try:
        yield
    finally:
        HOLD.release()


@pytest.fixture(autouse=True)
def _exclusive_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """One exclusive test in a shared file: the shared hold traded for an exclusive one."""
    if request.node.get_closest_marker("exclusive") is None or HOLD.state != "shared":
        yield
        return
    HOLD.release()
    HOLD.take("exclusive")
    try:
        yield
    finally:
        HOLD.release()
        HOLD.take("shared")


def _file_order(items: list[pytest.Item]) -> dict[str, int]:
    """Each file's place: 0 every test exclusive, 1 another engine file, 2 the rest."""
    order: dict[str, int] = {}
    for item in items:
        path = str(item.fspath)
        if not _engine_module(item):
            order[path] = 2
        elif item.get_closest_marker("exclusive") is None:
            order[path] = 1
        else:
            order.setdefault(path, 0)
    return order


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Exclusive files first, then the other engine files, then the unit tests (see the
    module's docstring); within each, the order of collection, a file's tests together."""
    order = _file_order(items)
    items[:] = [item for _, _, item in sorted(
        (order[str(item.fspath)], index, item) for index, item in enumerate(items))]


def _descends_from_us(pid: int) -> bool:
    me = os.getpid()
    for _ in range(64):
        if pid == me:
            return True
        if pid <= 1:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the command's ")"
    return False


@contextlib.contextmanager
def shared_hold() -> Iterator[None]:
    """For session fixtures that touch the engine (set up before any file's hold)."""
    if HOLD.state is not None:
        yield
        return
    HOLD.take("shared")
    try:
        yield
    finally:
        HOLD.release()


def foreign(labels: dict[str, str]) -> bool:
    """Made by another worker's job that is still running (its owner alive on this host and
    neither this process nor one it started). Always False under an exclusive hold."""
    if HOLD.state != "shared" or not HOLD.active:
        return False
    pid = labels.get("orchestra.pid", "")
    if not pid.isdigit() or labels.get("orchestra.host", socket.gethostname()) != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False  # its owner is gone: what it left is left
    except PermissionError:
        pass
    return not _descends_from_us(int(pid))
