"""The runtime contract (tests/contract/runtime_contract.py) on FakeRuntime, plus what only
the fake promises: scripted commands, injected faults, and the optional parts it lacks
raising NotSupported. No engine, no threads, no sleeping."""

from __future__ import annotations

import threading

import pytest
from contract.runtime_contract import MISSING_IMAGE, Made, RuntimeContract, Script

from orchestrator.errors import LaunchError, NotSupported
from orchestrator.runtime.base import PART_METHODS, Part, Runtime, RuntimeFault
from orchestrator.runtime.fake import FAKE_PARTS, FakeRuntime, Ran

IMAGE = "orchestra/base:bookworm"


@pytest.fixture
def rt() -> FakeRuntime:
    fake = FakeRuntime()
    fake.add_image(IMAGE, {"/etc/os-release": b"fake\n"})
    return fake


@pytest.fixture
def image() -> str:
    return IMAGE


@pytest.fixture
def script(rt: FakeRuntime) -> Script:
    return lambda match, ran: rt.on_exec(match, ran)  # type: ignore[arg-type]


class TestFakeRuntimeContract(RuntimeContract):
    pass


def test_the_fake_implements_every_abstract_method_and_only_its_declared_parts():
    assert not FakeRuntime.__abstractmethods__
    assert len(Runtime.__abstractmethods__) == 20
    for part, methods in PART_METHODS.items():
        overridden = {m for m in methods if getattr(FakeRuntime, m) is not getattr(Runtime, m)}
        assert overridden == (set(methods) if part in FAKE_PARTS else set()), part


@pytest.mark.parametrize("part", sorted(set(Part) - FAKE_PARTS))
def test_a_part_the_fake_lacks_raises_not_supported_before_touching_anything(rt, part):
    method = PART_METHODS[part][0]
    calls = len(rt.calls)
    arguments = {"pull": ("x:1",), "tag_image": ("a", "b"), "import_image": ("t", "r", "t", []),
                 "commit": ("c", "r", "t", {}), "attach": ("c", ["true"]), "spawn": ("c", ["true"])}
    with pytest.raises(NotSupported) as raised:
        getattr(rt, method)(*arguments.get(method, ("c",)))
    assert isinstance(raised.value, LaunchError) and raised.value.retryable is False
    assert (raised.value.part, raised.value.method) == (str(part), method)
    assert "FakeRuntime" in str(raised.value) and rt.calls[calls:] == []
    assert part not in rt.capabilities().parts


def test_a_scripted_command_runs_its_handler_and_leaves_its_files(made_fake):
    rt, made = made_fake
    seen: list[dict[str, str]] = []

    def agent(call):
        seen.append(call.env)
        return Ran(exit_code=7, output=b"done", writes={"/logs/agent/out.txt": b"x" * 10})

    rt.on_exec("run-agent", agent)
    box = made.container()
    outcome = rt.exec(box, ["sh", "-c", "run-agent --fast"], env={"K": "v"}, capture=2)
    assert (outcome.exit_code, outcome.output) == (7, b"do")
    assert seen == [{"K": "v"}] and rt.containers[box].files["/logs/agent/out.txt"] == b"x" * 10
    assert rt.containers[box].execs[-1] == ["sh", "-c", "run-agent --fast"]
    assert rt.writable_layer_bytes(made.job) == {box: 10}


def test_an_injected_fault_raises_once_then_the_method_works(made_fake):
    rt, made = made_fake
    rt.fail("start")
    box = made.container(start=False)
    with pytest.raises(RuntimeFault, match="injected into start"):
        rt.start(box)
    rt.start(box)
    assert rt.is_running(box)


def test_a_command_killing_its_container_ends_with_no_exit_code(made_fake):
    rt, made = made_fake
    rt.on_exec("suicide", Ran(kills_container=True))
    box = made.container()
    assert rt.exec(box, ["suicide"]).exit_code is None and not rt.is_running(box)


def test_stop_ends_the_wait_with_no_exit_code(made_fake):
    rt, made = made_fake
    box = made.container()
    stop = threading.Event()
    stop.set()
    outcome = rt.exec(box, ["sleep", "5"], stop=stop)
    assert (outcome.exit_code, outcome.timed_out) == (None, False)


def test_a_missing_image_is_said_by_name(rt):
    with pytest.raises(RuntimeFault, match=MISSING_IMAGE):
        rt.image_facts(MISSING_IMAGE)


@pytest.fixture
def made_fake(rt):
    made = Made(rt, IMAGE)
    yield rt, made
    made.clean()
