"""The runtime contract: what every Runtime (orchestrator/runtime/base.py) must do, as test
cases run unchanged against each implementation. A runner subclasses `RuntimeContract`
and gives three fixtures:

- `rt`: the runtime under test;
- `image`: a local image with `sh` in it (the runner makes sure it is there);
- `script`: `script(match, ran)` tells a runtime that cannot run real processes what a
  command does (FakeRuntime.on_exec); a real engine runs the command itself and ignores it.

tests/unit/test_runtime_contract_fake.py runs them on FakeRuntime, and
tests/integration/test_runtime_contract_docker.py on DockerRuntime (the real engine).
Every object a case makes is labelled with its own job and removed after it.
"""

from __future__ import annotations

import io
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from orchestrator.errors import NotSupported, RuntimeMissing
from orchestrator.host.cleanup import owner_labels
from orchestrator.runtime.base import (
    LABEL_JOB,
    LABEL_KIND,
    TRIMMED_CAPABILITIES,
    Capabilities,
    ContainerSpec,
    OwnedObject,
    Part,
    Runtime,
    RuntimeFault,
)

Script = Callable[[str, object], None]
MISSING_IMAGE = "orchestra/contract-missing:absent"


@dataclass
class Made:
    """What one case made on the runtime, removed (idempotently) after it."""

    rt: Runtime
    image: str
    job: str = field(default_factory=lambda: f"contract-{uuid.uuid4().hex[:10]}")
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL_JOB: self.job, LABEL_KIND: "contract", **owner_labels()}

    def spec(self, command: list[str] | None = None, **overrides: object) -> ContainerSpec:
        values: dict[str, object] = dict(
            image=self.image, name=f"orchestra-{self.job}-{len(self.containers)}",
            labels=self.labels, command=command or ["sleep", "infinity"], cpus=0.5,
            memory_mb=256, pids_limit=64, network="none")
        values.update(overrides)
        return ContainerSpec(**values)  # type: ignore[arg-type]

    def container(self, command: list[str] | None = None, start: bool = True,
                  **overrides: object) -> str:
        container = self.rt.create(self.spec(command, **overrides))
        self.containers.append(container)
        if start:
            self.rt.start(container)
        return container

    def clean(self) -> None:
        for container in self.containers:
            self.rt.remove(container)
        for name in self.networks:
            self.rt.remove_network(name)
        for name in self.volumes:
            self.rt.remove_volume(name)
        for ref in self.images:
            self.rt.remove_image(ref)


def tar_of(files: dict[str, bytes], mode: int = 0o640) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def untar(chunks: Iterator[bytes] | None) -> dict[str, bytes | None]:
    """A tar stream as {member name: content (None: a directory)}."""
    assert chunks is not None
    data = b"".join(chunks)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        found: dict[str, bytes | None] = {}
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            found[member.name.rstrip("/")] = handle.read() if handle is not None else None
        return found


class RuntimeContract:
    """The cases. Not collected itself (no Test prefix): runners subclass it."""

    @pytest.fixture
    def made(self, rt: Runtime, image: str) -> Iterator[Made]:
        made = Made(rt, image)
        try:
            yield made
        finally:
            made.clean()

    # ---- the engine ---------------------------------------------------------------------
    def test_engine_facts_and_capabilities_agree(self, rt: Runtime) -> None:
        facts = rt.engine_facts()
        assert facts.cpus > 0 and facts.memory_mb > 0 and facts.oci_runtimes
        caps = rt.capabilities(facts)
        assert isinstance(caps, Capabilities)
        assert caps.oci_runtimes == facts.oci_runtimes
        assert caps.parts <= frozenset(Part)
        assert set(caps.why) <= {"disk_quota", "host_isolation"}
        assert (caps.disk_quota == "watchdog") == ("disk_quota" in caps.why)
        assert rt.unanswered(5.0) is None

    # ---- images ---------------------------------------------------------------------------
    def test_an_image_is_there_or_not_and_its_facts_read_back(self, rt: Runtime, image: str) -> None:
        assert rt.image_exists(image) is True
        assert rt.image_exists(MISSING_IMAGE) is False
        facts = rt.image_facts(image)
        assert facts.id and image in facts.tags
        with pytest.raises(RuntimeFault):
            rt.image_facts(MISSING_IMAGE)
        rt.remove_image(MISSING_IMAGE)  # idempotent: an absent image is success

    def test_a_container_of_a_missing_image_raises_runtime_fault_and_is_not_made(
            self, rt: Runtime, made: Made) -> None:
        with pytest.raises(RuntimeFault, match="not found"):
            rt.create(made.spec(image=MISSING_IMAGE))
        assert rt.labelled(f"{LABEL_JOB}={made.job}")[0] == []

    def test_an_unknown_oci_runtime_raises_runtime_missing(self, rt: Runtime, made: Made) -> None:
        with pytest.raises(RuntimeMissing):
            made.container(runtime="orchestra-contract-no-such-runtime", start=False)

    def test_a_second_container_of_the_same_name_raises_runtime_fault(
            self, rt: Runtime, made: Made) -> None:
        first = made.container(start=False, name=f"orchestra-{made.job}-twin")
        spec = made.spec(name=f"orchestra-{made.job}-twin")
        with pytest.raises(RuntimeFault):
            made.containers.append(rt.create(spec))
        assert rt.labelled(f"{LABEL_JOB}={made.job}")[0] == [first]

    # ---- exec ------------------------------------------------------------------------------
    def test_exec_returns_the_exit_code_and_the_output_it_was_asked_to_keep(
            self, rt: Runtime, made: Made) -> None:
        box = made.container()
        assert rt.is_running(box)
        code = rt.exec(box, ["sh", "-c", "exit 3"], capture=1024)
        assert (code.exit_code, code.timed_out, code.output) == (3, False, b"")
        said = rt.exec(box, ["echo", "contract"], capture=1024)
        assert (said.exit_code, said.output) == (0, b"contract\n")
        unkept = rt.exec(box, ["echo", "contract"])  # capture 0: output not kept
        assert (unkept.exit_code, unkept.output) == (0, b"")

    def test_a_command_that_does_not_exist_is_an_exit_code_not_an_error(
            self, rt: Runtime, made: Made) -> None:
        box = made.container()
        missing = rt.exec(box, ["orchestra-contract-no-such-command"], capture=1024)
        assert missing.exit_code in (126, 127) and not missing.timed_out
        assert rt.is_running(box)

    def test_exec_output_is_capped_at_capture_bytes(self, rt: Runtime, made: Made) -> None:
        box = made.container()
        flood = rt.exec(box, ["head", "-c", "200000", "/dev/zero"], capture=100)
        assert flood.exit_code == 0 and flood.output == b"\0" * 100

    def test_exec_past_its_deadline_times_out_with_no_exit_code(self, rt: Runtime, made: Made) -> None:
        box = made.container()
        started = time.monotonic()
        late = rt.exec(box, ["sleep", "30"], deadline=time.time() + 1.0)
        assert (late.timed_out, late.exit_code) == (True, None)
        assert time.monotonic() - started < 20  # hang guard only (generous): not a timing test
        assert rt.is_running(box)  # the deadline ends the wait, not the container

    def test_exec_in_a_stopped_container_raises_runtime_fault(self, rt: Runtime, made: Made) -> None:
        box = made.container()
        rt.kill(box)
        assert not rt.is_running(box)
        with pytest.raises(RuntimeFault):
            rt.exec(box, ["true"])

    def test_an_oom_killed_command_is_137_and_counted(self, rt: Runtime, made: Made,
                                                        script: Script) -> None:
        from orchestrator.runtime.fake import Ran

        box = made.container(memory_mb=32)
        assert rt.oom_kills(box) == 0
        hog = "tail /dev/zero"  # tail holds an endless line in memory: the OOM killer ends it
        script(hog, Ran(oom=True))
        ended = rt.exec(box, ["sh", "-c", hog], deadline=time.time() + 60)
        assert ended.exit_code == 137 and not ended.timed_out
        assert rt.oom_kills(box) >= 1
        assert rt.is_running(box)  # an exec'd process's OOM leaves the container running

    # ---- archives ---------------------------------------------------------------------------
    def test_put_then_get_archive_round_trips_files(self, rt: Runtime, made: Made) -> None:
        box = made.container()
        rt.put_archive(box, "/tmp", tar_of({"contract/a.txt": b"alpha\n", "contract/b/c.bin": b"\x00\x01"}))
        tree = untar(rt.get_archive(box, "/tmp/contract"))
        assert tree["contract/a.txt"] == b"alpha\n" and tree["contract/b/c.bin"] == b"\x00\x01"
        assert tree["contract"] is None and tree["contract/b"] is None  # directories
        assert untar(rt.get_archive(box, "/tmp/contract/a.txt")) == {"a.txt": b"alpha\n"}
        assert rt.exec(box, ["cat", "/tmp/contract/a.txt"], capture=100).output == b"alpha\n"

    def test_get_archive_of_an_absent_path_is_none_and_put_into_one_raises(
            self, rt: Runtime, made: Made) -> None:
        box = made.container()
        assert rt.get_archive(box, "/tmp/contract-absent") is None
        with pytest.raises(RuntimeFault):
            rt.put_archive(box, "/contract-absent/dir", tar_of({"x": b"1"}))
        gone = f"orchestra-{made.job}-never-made"  # no such container: None, and RuntimeFault
        assert rt.get_archive(gone, "/tmp") is None
        with pytest.raises(RuntimeFault):
            rt.put_archive(gone, "/tmp", tar_of({"x": b"1"}))
        with pytest.raises(RuntimeFault):
            rt.exec(gone, ["true"])
        with pytest.raises(RuntimeFault):
            rt.wait(gone, 1)

    def test_put_archive_works_on_a_container_not_started(self, rt: Runtime, made: Made) -> None:
        box = made.container(start=False)
        rt.put_archive(box, "/tmp", tar_of({"seeded.txt": b"seed"}))
        rt.start(box)
        assert rt.exec(box, ["cat", "/tmp/seeded.txt"], capture=100).output == b"seed"

    # ---- limits, lifetime -------------------------------------------------------------------
    def test_limits_read_back_equal_the_spec(self, rt: Runtime, made: Made) -> None:
        box = made.container(cpus=0.5, memory_mb=96, pids_limit=48)
        got = rt.limits(box)
        assert got.nano_cpus == 500_000_000
        assert got.memory_bytes == got.memswap_bytes == 96 * 1024 * 1024
        assert got.pids_limit == 48
        assert set(TRIMMED_CAPABILITIES) <= set(got.cap_drop)
        assert "no-new-privileges:true" in got.security_opt and got.init is True
        assert got.network == "none" and got.log_max_size == "10m"
        sealed = made.container(drop_all_capabilities=True, name=f"orchestra-{made.job}-sealed")
        assert rt.limits(sealed).cap_drop == ["ALL"]

    def test_kill_stops_remove_removes_and_both_are_idempotent(self, rt: Runtime, made: Made) -> None:
        box = made.container()
        assert rt.is_running(box)
        rt.kill(box)
        assert rt.is_running(box) is False
        rt.kill(box)  # not running: no error
        assert rt.labelled(f"{LABEL_JOB}={made.job}")[0] == [box]  # killed, not removed
        rt.remove(box)
        assert rt.is_running(box) is False
        assert rt.labelled(f"{LABEL_JOB}={made.job}")[0] == []
        rt.remove(box)  # gone: success
        rt.kill(box)  # gone: no error
        with pytest.raises(RuntimeFault):
            rt.limits(box)

    def test_remove_kills_a_running_container(self, rt: Runtime, made: Made) -> None:
        box = made.container()
        rt.remove(box)
        assert not rt.is_running(box) and rt.labelled(f"{LABEL_JOB}={made.job}")[0] == []

    def test_wait_gives_the_main_process_exit_code_or_none_past_the_timeout(
            self, rt: Runtime, made: Made) -> None:
        ended = made.container(["sh", "-c", "exit 5"])
        assert rt.wait(ended, 30) == 5
        assert not rt.is_running(ended)
        sleeper = made.container(["sleep", "30"], name=f"orchestra-{made.job}-sleeper")
        assert rt.wait(sleeper, 1) is None
        assert rt.is_running(sleeper)

    # ---- the trial's network ----------------------------------------------------------------
    def test_a_network_holds_containers_and_says_where_the_host_is(self, rt: Runtime, made: Made) -> None:
        name = f"orcc-{made.job[-10:]}"
        network = rt.create_network(name, internal=True, labels=made.labels)
        made.networks.append(name)
        assert network.name == name and network.internal is True
        assert network.gateway and network.subnet  # where containers reach the host
        box = made.container(network=name)
        assert rt.limits(box).network == name
        containers, networks, _ = rt.labelled(f"{LABEL_JOB}={made.job}")
        assert containers == [box] and networks == [name]
        rt.remove(box)
        rt.remove_network(name)
        rt.remove_network(name)  # idempotent
        assert rt.labelled(f"{LABEL_JOB}={made.job}")[1] == []

    # ---- optional parts -----------------------------------------------------------------------
    def test_each_optional_part_is_there_exactly_when_declared(self, rt: Runtime, made: Made) -> None:
        """A part in capabilities().parts works (whatever else it may raise, never
        NotSupported); a part not declared raises NotSupported, naming itself."""
        box = made.container()
        tag = f"orchestra/contract-{made.job}:1"
        probes: dict[Part, Callable[[], object]] = {
            Part.REGISTRY: lambda: (rt.tag_image(made.image, tag), made.images.append(tag)),
            Part.IMPORT: lambda: rt.import_image("/nonexistent/contract.tar", "orchestra/contract-import",
                                                 made.job, []),
            Part.COMMIT: lambda: made.images.append(rt.commit(box, "orchestra/contract-commit", made.job,
                                                              made.labels)),
            Part.NETWORK_SWITCH: lambda: rt.disconnect_network(box, "orcc-absent-network"),
            Part.VOLUMES: lambda: made.volumes.append(rt.create_volume(f"orcc-{made.job}", made.labels)),
            Part.ATTACH: lambda: rt.attach(box, ["true"]).close(),
            Part.SPAWN: lambda: rt.spawn(box, ["true"]),
            Part.HEALTH: lambda: rt.health(box),
            Part.LAYER_SIZES: lambda: rt.writable_layer_bytes(made.job),
            Part.LISTING: lambda: rt.owned_objects(),
        }
        declared = rt.capabilities().parts
        for part, probe in probes.items():
            if part in declared:
                try:
                    probe()
                except NotSupported as exc:  # pragma: no cover - the failure being tested for
                    pytest.fail(f"{part} is declared but raised {exc}")
                except Exception:
                    pass  # the part is there; this probe's arguments may not suit it
            else:
                with pytest.raises(NotSupported) as raised:
                    probe()
                assert raised.value.part == part and raised.value.retryable is False
        if Part.HEALTH in declared:
            assert rt.health(box) == ("running", None)  # no healthcheck: no health status
        if Part.LAYER_SIZES in declared:
            assert box in rt.writable_layer_bytes(made.job)
        if Part.LISTING in declared:
            owned = rt.owned_objects()
            assert all(isinstance(row, OwnedObject) for row in owned)
            assert ("container", box) in [(row.kind, row.name) for row in owned]
        if Part.REGISTRY not in declared:  # pre-flight's question gets an answer, not an error
            assert "registry" in (rt.registry_refusal("localhost:5000") or "")
