"""FakeRuntime: the runtime's core in memory, for tests (DESIGN 6: a second implementation
that shows the seam is a seam). No engine, no threads, no sleeping: deterministic.

- Images are a dict (`add_image`): an image's files become each new container's.
- A container is a record (`FakeContainer`): its spec, state, exit code, OOM kills, a
  filesystem of paths (files with bytes and modes, directories) that put_archive and
  get_archive read and write as tar, the networks it is on, and every command run in it.
- `exec` runs a scripted handler (`on_exec`: the first registered whose match fits, newest
  first), else a small built-in vocabulary (true, false, exit N, sleep N, echo, cat, head
  -c N /dev/zero, mkdir -p, sh -c of any of those), else exits 127 (not found). A
  handler says what the command did (`Ran`): exit code, output, how long it ran (past the
  deadline: timed out, with no exit code, without waiting), an OOM kill, files written, or
  the container dying under it.
- Faults are injected per method (`fail`): the next call raises RuntimeFault (or the
  exception given), as an engine failing mid-trial would.

It has the optional parts a trial's ordinary path uses (volumes, network switching,
health, listing, layer sizes); it lacks registry, import, commit, attach and spawn, which
raise NotSupported (the base class's) and are absent from `capabilities().parts`.
"""

from __future__ import annotations

import io
import math
import posixpath
import shlex
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import BinaryIO

from orchestrator.errors import RuntimeMissing
from orchestrator.runtime.base import (
    LABEL_JOB,
    LABEL_PID,
    TRIMMED_CAPABILITIES,
    BuildFailed,
    Capabilities,
    ContainerLimits,
    ContainerSpec,
    EngineFacts,
    ExecResult,
    ImageFacts,
    Network,
    OwnedObject,
    Part,
    Runtime,
    RuntimeFault,
)

FAKE_PARTS = frozenset({Part.VOLUMES, Part.NETWORK_SWITCH, Part.HEALTH, Part.LISTING,
                        Part.LAYER_SIZES})
HOST_ADDRESS = "127.0.0.1"  # where a fake container "reaches the host": services bind here


@dataclass
class Ran:
    """What a scripted command did."""

    exit_code: int = 0
    output: bytes = b""
    seconds: float = 0.0  # how long it ran: past the exec's deadline, it timed out
    oom: bool = False  # the OOM killer killed it: exit 137, one more oom_kills
    kills_container: bool = False  # the container died under it: no exit code
    writes: dict[str, bytes] = field(default_factory=dict)  # files it left (absolute paths)


@dataclass
class FakeExec:
    """One command as a handler sees it."""

    container: FakeContainer
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    user: str | None
    stdin: bytes | None


Handler = Callable[[FakeExec], Ran]


@dataclass
class FakeContainer:
    id: str
    spec: ContainerSpec
    files: dict[str, bytes]  # absolute path -> content
    dirs: set[str]  # absolute paths of directories ("/" included)
    state: str = "created"  # created | running | exited
    exit_code: int | None = None
    oom_kills: int = 0
    networks: set[str] = field(default_factory=set)
    execs: list[list[str]] = field(default_factory=list)  # every command run, in order
    main: Ran | None = None  # what its own command does once started
    modes: dict[str, int] = field(default_factory=dict)
    written_bytes: int = 0  # its "writable layer": what put_archive and execs wrote


@dataclass
class FakeImage:
    facts: ImageFacts
    files: dict[str, bytes] = field(default_factory=dict)


class FakeRuntime(Runtime):
    """The Runtime's core (and the parts in FAKE_PARTS) in memory."""

    def __init__(self, cpus: float = 2.0, memory_mb: int = 4096,
                 oci_runtimes: tuple[str, ...] = ("runc",)):
        self.cpus, self.memory_mb, self.oci_runtimes = cpus, memory_mb, list(oci_runtimes)
        self.images: dict[str, FakeImage] = {}
        self.containers: dict[str, FakeContainer] = {}
        self.networks: dict[str, tuple[Network, dict[str, str]]] = {}
        self.volumes: dict[str, dict[str, str]] = {}
        self.handlers: list[tuple[Callable[[list[str]], bool], Handler]] = []
        self.faults: dict[str, list[BaseException]] = {}
        self.calls: list[str] = []  # every method called, in order
        self.health_states: dict[str, str] = {}  # container -> its healthcheck's status
        self._serial = 0
        self._lock = threading.Lock()  # trials of a job may share one fake across threads
        self.engine_id = f"fake-{uuid.uuid4().hex}"  # an engine of its own: shares no real pool

    # ---- scripting ------------------------------------------------------------------
    def add_image(self, ref: str, files: dict[str, bytes] | None = None, workdir: str = "",
                  env: list[str] | None = None, labels: dict[str, str] | None = None,
                  size: int = 0, parent: str = "") -> str:
        """An image the fake holds (as built or pulled: `parent` the id it was built on,
        `size` its bytes with the parent's); returns its id."""
        image_id = f"sha256:{self._next():064x}"
        self.images[ref] = FakeImage(ImageFacts(id=image_id, tags=[ref], labels=dict(labels or {}),
                                                env=list(env or []), workdir=workdir, size=size,
                                                parent=parent),
                                     dict(files or {}))
        return image_id

    def on_exec(self, match: str | Callable[[list[str]], bool], handler: Handler | Ran) -> None:
        """Script commands: `match` a substring of the command line (or a predicate on its
        argv); `handler` what it did (a Ran, or a function of the FakeExec giving one).
        Newest first."""
        test = match if callable(match) else (lambda argv, text=match: text in " ".join(argv))
        run = handler if callable(handler) else (lambda _exec, ran=handler: ran)
        self.handlers.insert(0, (test, run))

    def fail(self, method: str, times: int = 1, error: BaseException | None = None) -> None:
        """The next `times` calls of `method` raise `error` (default: a RuntimeFault)."""
        fault = error or RuntimeFault(f"the engine failed (injected into {method})")
        self.faults.setdefault(method, []).extend([fault] * times)

    def _call(self, method: str) -> None:
        self.calls.append(method)
        pending = self.faults.get(method)
        if pending:
            raise pending.pop(0)

    def _next(self) -> int:
        with self._lock:
            self._serial += 1
            return self._serial

    def _container(self, container: str) -> FakeContainer:
        found = self.containers.get(container) or next(
            (c for c in self.containers.values() if c.spec.name == container), None)
        if found is None:
            raise RuntimeFault(f"no such container: {container[:64]}")
        return found

    # ---- the engine -----------------------------------------------------------------
    def engine_facts(self) -> EngineFacts:
        self._call("engine_facts")
        return EngineFacts(cpus=self.cpus, memory_mb=self.memory_mb,
                           oci_runtimes=list(self.oci_runtimes), version="fake", kind="fake",
                           engine_id=self.engine_id)

    def capabilities(self, facts: EngineFacts | None = None) -> Capabilities:
        self._call("capabilities")
        reason = "the fake runtime keeps containers in memory: nothing to enforce on a host"
        return Capabilities(disk_quota="watchdog", host_isolation="none",
                            oci_runtimes=(facts or self.engine_facts()).oci_runtimes,
                            local_engine=False, registry_push=False,
                            why={"disk_quota": reason, "host_isolation": reason}, parts=FAKE_PARTS)

    # ---- images ---------------------------------------------------------------------
    def image_exists(self, ref: str) -> bool:
        self._call("image_exists")
        return self._image(ref) is not None

    def _image(self, ref: str) -> FakeImage | None:
        return self.images.get(ref) or next(
            (i for i in self.images.values() if i.facts.id == ref), None)

    def image_facts(self, ref: str) -> ImageFacts:
        self._call("image_facts")
        image = self._image(ref)
        if image is None:
            raise RuntimeFault(f"no such image: {ref}")
        return image.facts

    def build_image(self, context_tar: bytes | BinaryIO, tag: str, labels: dict[str, str],
                    timeout_sec: float) -> None:
        """The context's Dockerfile is not run: its files (but the Dockerfile) become the
        image's, under its WORKDIR if it names one (else /)."""
        self._call("build_image")
        data = context_tar if isinstance(context_tar, bytes) else context_tar.read()
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
            if "Dockerfile" not in members:
                raise BuildFailed("the build context has no Dockerfile")
            dockerfile = _read(tar, members.pop("Dockerfile")).decode(errors="replace")
            workdir = next((line.split(None, 1)[1].strip() for line in dockerfile.splitlines()
                            if line.upper().startswith("WORKDIR ")), "/")
            files = {posixpath.join(workdir, name): _read(tar, m) for name, m in members.items()}
        self.add_image(tag, files, workdir=workdir if workdir != "/" else "", labels=labels)

    def remove_image(self, ref: str) -> None:
        self._call("remove_image")
        image = self._image(ref)
        if image is None:
            return
        if any(c.spec.image == ref or c.spec.image == image.facts.id for c in self.containers.values()):
            raise RuntimeFault(f"image {ref} is used by a container")
        self.images = {k: v for k, v in self.images.items() if v is not image}

    # ---- networks -------------------------------------------------------------------
    def create_network(self, name: str, internal: bool, labels: dict[str, str]) -> Network:
        self._call("create_network")
        if name in self.networks:
            raise RuntimeFault(f"network {name} already exists")
        network = Network(name=name, gateway=HOST_ADDRESS, subnet=f"{HOST_ADDRESS}/32",
                          internal=internal, host_isolation="none")
        self.networks[name] = (network, dict(labels))
        return network

    def remove_network(self, name: str) -> None:
        self._call("remove_network")
        if any(name in c.networks for c in self.containers.values()):
            raise RuntimeFault(f"network {name} has active endpoints")
        self.networks.pop(name, None)

    def adopt_network(self, name: str) -> Network | None:
        self._call("adopt_network")
        held = self.networks.get(name)
        if held is None or any(name in c.networks for c in self.containers.values()):
            return None
        return held[0]

    def connect_network(self, container: str, network: str) -> None:
        self._call("connect_network")
        if network not in self.networks:
            raise RuntimeFault(f"no such network: {network}")
        self._container(container).networks.add(network)

    def connect_network_if_absent(self, container: str, network: str) -> None:
        self.connect_network(container, network)

    def disconnect_network(self, container: str, network: str) -> None:
        self._call("disconnect_network")
        self._container(container).networks.discard(network)

    def create_volume(self, name: str, labels: dict[str, str]) -> str:
        self._call("create_volume")
        self.volumes[name] = dict(labels)
        return name

    def create_bind_volume(self, name: str, host_path: str, labels: dict[str, str]) -> str:
        return self.create_volume(name, labels)

    def remove_volume(self, name: str) -> None:
        self._call("remove_volume")
        self.volumes.pop(name, None)

    # ---- containers -----------------------------------------------------------------
    def create(self, spec: ContainerSpec) -> str:
        self._call("create")
        image = self._image(spec.image)
        if image is None:
            raise RuntimeFault(f"image {spec.image} not found (orchestra never pulls)")
        if spec.runtime and spec.runtime not in self.oci_runtimes:
            raise RuntimeMissing(f"the engine has no OCI runtime {spec.runtime!r} "
                                 f"(it has: {', '.join(self.oci_runtimes)}); not retried")
        if any(c.spec.name == spec.name for c in self.containers.values()):
            raise RuntimeFault(f"the container name {spec.name} is already in use")
        if spec.network not in ("none", *self.networks):
            raise RuntimeFault(f"no such network: {spec.network}")
        files = dict(image.files)
        dirs = {"/", "/tmp"} | {d for path in files for d in _parents(path)}
        if spec.workdir or image.facts.workdir:
            dirs |= {spec.workdir or image.facts.workdir, *_parents(spec.workdir or image.facts.workdir)}
        found = FakeContainer(id=f"{self._next():064x}", spec=spec, files=files, dirs=dirs,
                              networks={spec.network} - {"none"})
        self.containers[found.id] = found
        return found.id

    def start(self, container: str) -> None:
        self._call("start")
        found = self._container(container)
        command = found.spec.command or ["sleep", "infinity"]
        found.main = self._run(FakeExec(found, command, dict(found.spec.env), found.spec.workdir,
                                        found.spec.user, None))
        found.state, found.exit_code = "running", None
        if found.main.seconds == 0:  # it ended as it started
            self._end_main(found)

    def _end_main(self, found: FakeContainer) -> None:
        """Its own command ended: what it wrote stays, its exit code is the container's."""
        assert found.main is not None
        self._write(found, found.main.writes)
        found.state, found.exit_code = "exited", found.main.exit_code
        if found.main.oom:
            found.oom_kills, found.exit_code = found.oom_kills + 1, 137

    def exec(self, container: str, command: list[str], *, deadline: float | None = None,
             env: dict[str, str] | None = None, workdir: str | None = None,
             user: str | None = None, stdin: bytes | None = None, capture: int = 0,
             stop: threading.Event | None = None) -> ExecResult:
        """See Runtime.exec. Nothing waits: a command that runs longer than the time left
        to its deadline has timed out at once."""
        self._call("exec")
        found = self._container(container)
        if found.state != "running":
            raise RuntimeFault(f"container {container[:12]} is not running")
        left = (time.time() + 60 if deadline is None else deadline) - time.time()
        ran = self._run(FakeExec(found, list(command), dict(env or {}), workdir, user, stdin))
        output = ran.output[:capture] if capture > 0 else b""
        if stop is not None and stop.is_set():
            return ExecResult(None, False, output)
        if ran.seconds > left:
            return ExecResult(None, True, output)
        self._write(found, ran.writes)
        if ran.kills_container:
            found.state, found.exit_code = "exited", 137
            return ExecResult(None, False, output)
        if ran.oom:
            found.oom_kills += 1
            return ExecResult(137, False, output)
        return ExecResult(ran.exit_code, False, output)

    def _run(self, call: FakeExec) -> Ran:
        call.container.execs.append(call.command)
        for test, handler in list(self.handlers):
            if test(call.command):
                return handler(call)
        return _builtin(call) or Ran(exit_code=127, output=f"{call.command[0]}: not found\n".encode())

    def wait(self, container: str, timeout_sec: float) -> int | None:
        self._call("wait")
        found = self._container(container)
        if found.state == "running" and found.main is not None and found.main.seconds <= timeout_sec:
            self._end_main(found)
        return found.exit_code if found.state == "exited" else None

    def put_archive(self, container: str, path: str, tar_bytes: bytes | BinaryIO) -> None:
        self._call("put_archive")
        found = self._container(container)
        root = _absolute(path)
        if root not in found.dirs:
            raise RuntimeFault(f"copy into {path} failed: no such directory")
        data = tar_bytes if isinstance(tar_bytes, bytes) else tar_bytes.read()
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                target = posixpath.normpath(posixpath.join(root, member.name))
                if member.isdir():
                    found.dirs |= {target, *_parents(target)}
                    found.modes[target] = member.mode
                elif member.isfile():
                    self._write(found, {target: _read(tar, member)})
                    found.modes[target] = member.mode

    def _write(self, found: FakeContainer, files: dict[str, bytes]) -> None:
        for target, content in files.items():
            found.dirs |= set(_parents(target))
            found.files[target] = content
            found.written_bytes += len(content)

    def get_archive(self, container: str, path: str) -> Generator[bytes, None, None] | None:
        self._call("get_archive")
        found = self.containers.get(container) or next(
            (c for c in self.containers.values() if c.spec.name == container), None)
        source = _absolute(path)
        if found is None or (source not in found.files and source not in found.dirs):
            return None
        name = posixpath.basename(source) or "."
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            if source in found.files:
                _add_file(tar, name, found.files[source], found.modes.get(source, 0o644))
            else:
                _add_dir(tar, name, found.modes.get(source, 0o755))
                prefix = source.rstrip("/") + "/"
                for d in sorted(d for d in found.dirs if d.startswith(prefix)):
                    _add_dir(tar, name + "/" + d[len(prefix):], found.modes.get(d, 0o755))
                for f in sorted(f for f in found.files if f.startswith(prefix)):
                    _add_file(tar, name + "/" + f[len(prefix):], found.files[f],
                              found.modes.get(f, 0o644))
        data = buffer.getvalue()

        def chunks() -> Generator[bytes, None, None]:
            for start in range(0, len(data), 65536):
                yield data[start:start + 65536]

        return chunks()

    def limits(self, container: str) -> ContainerLimits:
        self._call("limits")
        spec = self._container(container).spec
        memory = spec.memory_mb * 1024 * 1024
        return ContainerLimits(
            nano_cpus=int(spec.cpus * 1e9), memory_bytes=memory, memswap_bytes=memory,
            pids_limit=spec.pids_limit, host_pids_limit=spec.pids_limit,
            cap_drop=["ALL"] if spec.drop_all_capabilities else list(TRIMMED_CAPABILITIES),
            security_opt=["no-new-privileges:true"], init=True, network=spec.network,
            log_max_size=spec.log_max_size, oci_runtime=spec.runtime or "runc")

    def is_running(self, container: str) -> bool:
        self._call("is_running")
        found = self.containers.get(container) or next(
            (c for c in self.containers.values() if c.spec.name == container), None)
        return found is not None and found.state == "running"

    def oom_kills(self, container: str) -> int:
        self._call("oom_kills")
        return self._container(container).oom_kills

    def kill(self, container: str) -> None:
        self._call("kill")
        found = self.containers.get(container)
        if found is not None and found.state == "running":
            found.state, found.exit_code = "exited", 137

    def remove(self, container: str) -> None:
        self._call("remove")
        found = self.containers.get(container) or next(
            (c for c in self.containers.values() if c.spec.name == container), None)
        if found is not None:
            del self.containers[found.id]

    def health(self, container: str) -> tuple[str, str | None]:
        self._call("health")
        found = self._container(container)
        status = self.health_states.get(found.id, "healthy") if found.spec.healthcheck else None
        return found.state, status

    def writable_layer_bytes(self, job: str) -> dict[str, int]:
        self._call("writable_layer_bytes")
        return {c.id: c.written_bytes for c in self.containers.values()
                if c.state == "running" and c.spec.labels.get(LABEL_JOB) == job}

    # ---- what orchestra made -----------------------------------------------------------
    def labelled(self, *labels: str) -> tuple[list[str], list[str], list[str]]:
        self._call("labelled")
        wanted = [*labels, LABEL_PID]
        return ([c.id for c in self.containers.values() if _carries(c.spec.labels, wanted)],
                [n for n, (_, tags) in self.networks.items() if _carries(tags, wanted)],
                [v for v, tags in self.volumes.items() if _carries(tags, wanted)])

    def owned_objects(self) -> list[OwnedObject]:
        self._call("owned_objects")
        rows = [OwnedObject("container", c.id, dict(c.spec.labels))
                for c in self.containers.values() if LABEL_PID in c.spec.labels]
        rows += [OwnedObject("network", n, dict(tags))
                 for n, (_, tags) in self.networks.items() if LABEL_PID in tags]
        rows += [OwnedObject("volume", v, dict(tags))
                 for v, tags in self.volumes.items() if LABEL_PID in tags]
        return rows

    def images_labelled(self, label: str) -> list[ImageFacts]:
        self._call("images_labelled")
        return [i.facts for i in self.images.values() if _carries(i.facts.labels, [label])]

    def image_tree(self) -> dict[str, tuple[str, int]]:
        self._call("image_tree")
        return {i.facts.id: (i.facts.parent, i.facts.size) for i in self.images.values()}


def _carries(labels: dict[str, str], wanted: list[str]) -> bool:
    for want in wanted:
        key, sep, value = want.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


def _absolute(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/"))


def _parents(path: str) -> list[str]:
    parts, out = posixpath.normpath(path).split("/")[1:-1], ["/"]
    for i in range(len(parts)):
        out.append("/" + "/".join(parts[:i + 1]))
    return out


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tar.extractfile(member)
    return handle.read() if handle is not None else b""


def _add_file(tar: tarfile.TarFile, name: str, content: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(content), mode
    tar.addfile(info, io.BytesIO(content))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _builtin(call: FakeExec) -> Ran | None:
    """The few commands the fake knows without a script (as sh would run them)."""
    argv = call.command
    if len(argv) == 3 and argv[0] in ("sh", "bash") and argv[1] == "-c":
        try:
            argv = shlex.split(argv[2])
        except ValueError:
            return None
        if any(word in (";", "&&", "||", "|", ">", "<") for word in argv):
            return None
    if not argv:
        return Ran()
    name, args = argv[0], argv[1:]
    files = call.container.files
    if name in ("true", ":"):
        return Ran()
    if name == "false":
        return Ran(exit_code=1)
    if name == "exit":
        return Ran(exit_code=int(args[0]) if args and args[0].isdigit() else 0)
    if name == "sleep" and args:
        return Ran(seconds=math.inf if args[0] == "infinity" else float(args[0]))
    if name == "echo":
        return Ran(output=(" ".join(args) + "\n").encode())
    if name == "cat" and args:
        path = posixpath.normpath(posixpath.join(call.workdir or "/", args[0]))
        if path in files:
            return Ran(output=files[path])
        return Ran(exit_code=1, output=f"cat: {args[0]}: No such file or directory\n".encode())
    if name == "head" and args[:1] == ["-c"] and len(args) == 3 and args[2] == "/dev/zero":
        return Ran(output=b"\0" * int(args[1]))
    if name == "mkdir":
        for path in (a for a in args if not a.startswith("-")):
            call.container.dirs |= {path, *_parents(path)}
        return Ran()
    return None
