"""Trial networks (DESIGN 2 step 3): each live trial has its own, and they outlive jobs.

Creating a bridge with its host-isolation rule costs about 0.07 s and removing it about
0.18 s on Docker 20.10 (measured): more than a one-trial run's whole set-up. So networks
are kept between jobs in a host-wide pool:

- a pool network carries orchestra.pool and orchestra.kind, an owner pid but no job: the
  orphan reaper (which works by job) leaves it, `orchestra cleanup` removes the idle ones
  and `cleanup --all` every one;
- the pool is the engine's, not the host's: each engine's networks have their lock files
  under LOCK_DIR/networks/ENGINE (a hash of `EngineFacts.engine_id`), so a job on another
  engine (a second socket, Podman, a FakeRuntime in the tests) never sees, claims or drops
  them;
- each has a lock file LOCK_DIR/networks/ENGINE/NAME; a process holds its flock for as long as
  it uses the network, so two processes (two jobs, Ray workers on one engine) never share
  one, and a hard-killed job's networks become free when the kernel drops its locks (a
  lease, held without waiting and unlinked by its remover while held, checked by inode:
  plain fcntl here, where filelock serves the other locks);
- a claimed network is checked first: it still exists, no container is attached, and its
  host-isolation rule is in place (re-added if not);
- at a job's end its networks are parked while the pool (idle and in use) holds fewer than
  ORCHESTRA_NETWORK_POOL (default 32), else removed; 0 turns the pool off (every network
  is removed at its job's end).

Within a job a network goes back to the job's free list only after every container of its
trial is removed, so no two live trials ever share one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import uuid
from pathlib import Path

from orchestrator.host.cleanup import owner_labels, try_remove
from orchestrator.log import get_logger
from orchestrator.paths import LOCK_DIR
from orchestrator.runtime import LABEL_KIND, Network, Runtime

log = get_logger()
LABEL_POOL = "orchestra.pool"
POOL_DIR = LOCK_DIR / "networks"
PREFIX = "orchestra-pool-"


def _pool_size() -> int:
    try:
        return max(0, int(os.environ.get("ORCHESTRA_NETWORK_POOL", "32")))
    except ValueError:
        return 32


def pool_dir(runtime: Runtime) -> Path:
    """Where this engine's pool networks have their lock files: one folder per engine.

    Raises: RuntimeFault when the engine does not answer (its facts name it)."""
    engine = runtime.engine_facts().engine_id
    return POOL_DIR / ("engine-" + hashlib.sha256(engine.encode()).hexdigest()[:16])


def _kind(internal: bool) -> str:
    return "int" if internal else "pub"


def _try_lock(path: Path) -> int | None:
    """The flock of a pool network's lock file, without waiting; None if another process
    holds it or the file is gone (a remover unlinks it while holding the lock)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path).st_ino:  # unlinked (and maybe re-made) meanwhile
            raise OSError("lock file replaced")
    except OSError:
        os.close(fd)
        return None
    return fd


def _new_lock(path: Path) -> int:
    """A new network's lock file, which appears under its name already locked: made under
    a draft name, locked, then linked. Created in place, it was unlocked for a moment, and a
    job claiming from the pool then could lock it, find no such network (not made yet) and
    unlink it: the maker's trial failed to start (seen once in tests/hostile)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.parent / f".{path.name}.{os.getpid()}"
    fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.link(draft, path)  # fails if the name exists
    except OSError:
        os.close(fd)
        raise
    finally:
        os.unlink(draft)
    return fd


def _drop(path: Path, fd: int) -> None:
    """Forget a pool network we hold: its lock file goes (while still locked), then the lock."""
    try:
        os.unlink(path)
    except OSError:
        pass
    os.close(fd)


class NetworkPool:
    """The networks of one job: taken from its engine's pool (or made), reused by its trials,
    handed back to the pool at the end."""

    def __init__(self, runtime: Runtime, job: str, keep: int | None = None):
        self.runtime, self.job = runtime, job
        self.keep = _pool_size() if keep is None else keep
        self._free: dict[bool, list[Network]] = {True: [], False: []}
        self._held: dict[str, tuple[Network, int]] = {}  # name -> (network, lock fd)
        self._lock = threading.Lock()
        self._dir: Path | None = None  # the engine's pool folder, asked of it on first use
        self.claimed = self.created = 0

    @property
    def folder(self) -> Path:
        """This engine's pool folder (pool_dir), asked once."""
        if self._dir is None:
            self._dir = pool_dir(self.runtime)
        return self._dir

    def acquire(self, internal: bool) -> Network:
        with self._lock:
            if self._free[internal]:
                return self._free[internal].pop()
        return self._claim(internal) or self._create(internal)

    def release(self, network: Network) -> None:
        """Back to the job's free list, every port of its gateway closed again."""
        if network.host_isolation == "iptables":
            try:
                self.runtime.open_host_ports(network, [])
            except Exception as exc:  # its next claim re-isolates it
                log.warning("networks.close_ports_failed", network=network.name, error=str(exc)[:300])
        with self._lock:
            self._free[network.internal].append(network)

    def _claim(self, internal: bool) -> Network | None:
        """An idle network from the host's pool, locked for this job."""
        if not self.keep:
            return None
        folder = self.folder
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return None
        for name in names:
            if not name.startswith(PREFIX + _kind(internal) + "-"):
                continue
            fd = _try_lock(folder / name)
            if fd is None:
                continue
            try:
                network = self.runtime.adopt_network(name)
            except Exception as exc:
                log.warning("networks.adopt_failed", network=name, error=str(exc)[:300])
                network = None
            if network is None or network.internal != internal:
                _drop(folder / name, fd)  # gone, busy with a dead job's container, or not ours: skip it
                if network is not None:
                    try_remove("network", self.runtime.remove_network, name)
                continue
            with self._lock:
                self._held[name] = (network, fd)
                self.claimed += 1
            return network
        return None

    def _create(self, internal: bool) -> Network:
        name = f"{PREFIX}{_kind(internal)}-{uuid.uuid4().hex[:12]}"
        lock = self.folder / name
        try:
            fd = _new_lock(lock)
        except OSError as exc:
            raise OSError(f"cannot create the network lock file {lock}: {exc}") from exc
        try:
            network = self.runtime.create_network(
                name, internal=internal, labels={LABEL_KIND: "network", LABEL_POOL: "1", **owner_labels()})
        except BaseException:
            _drop(lock, fd)
            raise
        with self._lock:
            self._held[name] = (network, fd)
            self.created += 1
        return network

    def close(self) -> None:
        """Park the job's networks (up to the pool's size), remove the rest."""
        with self._lock:
            held, self._held = self._held, {}
            self._free = {True: [], False: []}
        if not held:
            return
        folder = self.folder  # known: it holds networks
        try:
            parked = sum(n.startswith(PREFIX) for n in os.listdir(folder)) - len(held)
        except OSError:
            parked = 0
        for name, (_network, fd) in held.items():
            if parked < self.keep:
                os.close(fd)  # unlocked: idle in the pool
                parked += 1
                continue
            try_remove("network", self.runtime.remove_network, name)
            _drop(folder / name, fd)
        if self.claimed or self.created:
            log.debug("networks.closed", job=self.job, claimed=self.claimed, created=self.created)


def remove_idle(runtime: Runtime, dry_run: bool = False) -> list[str]:
    """Remove this engine's pool networks no process holds (or list them, `dry_run`)."""
    folder = pool_dir(runtime)
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(PREFIX))
    except OSError:
        names = []
    removed = []
    unlocked = set(runtime.labelled(LABEL_POOL)[1]) - set(names)  # its lock file was lost
    for name in sorted(unlocked):
        if not dry_run:
            try_remove("network", runtime.remove_network, name)
        removed.append(name)
    for name in names:
        fd = _try_lock(folder / name)
        if fd is None:
            continue
        if dry_run:
            os.close(fd)
        else:
            try_remove("network", runtime.remove_network, name)
            _drop(folder / name, fd)
        removed.append(name)
    return removed

