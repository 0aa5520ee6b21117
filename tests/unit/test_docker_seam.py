"""The Docker runtime's seam holds over all of it: docker-py's errors raised in a method of
any of its parts (the mixins of orchestrator/runtime/docker/), or of a subclass, come out
as RuntimeFault, each public method wrapped exactly once. No engine: a fake one fails."""

from __future__ import annotations

import pytest

from orchestrator.runtime.base import BuildFailed, RuntimeFault
from orchestrator.runtime.client import BROKEN_STREAM, APIError, DockerException
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.runtime.docker.containers import ContainersMixin
from orchestrator.runtime.docker.engine import EngineMixin
from orchestrator.runtime.docker.execs import ExecMixin
from orchestrator.runtime.docker.images import ImagesMixin
from orchestrator.runtime.docker.networks import NetworksMixin


class FailingEngine:
    """An Engine API client whose every call raises `error`."""

    base_url = "tcp://10.0.0.5:2376"  # another host: no loop disks, no firewall
    podman = False

    def __init__(self, error: BaseException):
        self.error = error

    def __getattr__(self, name: str):
        def call(*args: object, **kwargs: object) -> None:
            raise self.error
        return call


ERRORS = [APIError("500 Server Error: boom"), DockerException("no engine"),
          BROKEN_STREAM[0]("the stream was cut")]

# One public method of each part, with arguments, that lets the engine's error through.
CASES = {
    EngineMixin: ("engine_facts", ()),
    ImagesMixin: ("image_facts", ("orchestra/img:1",)),
    NetworksMixin: ("connect_network", ("c1", "n1")),
    ContainersMixin: ("start", ("c1",)),
    ExecMixin: ("spawn", ("c1", ["true"])),
}


def public_methods(cls: type) -> list[str]:
    return sorted(name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name)))


def test_every_part_of_the_runtime_is_covered():
    parts = {klass for klass in DockerRuntime.__mro__
             if klass.__module__.startswith("orchestrator.runtime.docker.")
             and any(not name.startswith("_") for name in vars(klass))}
    assert parts == set(CASES)
    for part, (method, _) in CASES.items():
        assert method in vars(part), (part, method)


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("part", list(CASES), ids=lambda p: p.__name__)
def test_an_engine_error_in_any_part_comes_out_as_runtime_fault(part, error):
    method, args = CASES[part]
    runtime = DockerRuntime(engine=FailingEngine(error))
    with pytest.raises(RuntimeFault) as raised:
        getattr(runtime, method)(*args)
    assert raised.value.__cause__ is error
    with pytest.raises(type(error)):  # the part itself does not convert: the seam does
        getattr(part, method)(runtime, *args)


def test_every_public_method_is_wrapped_once():
    methods = public_methods(DockerRuntime)
    assert len(methods) > 40 and "exec" in methods and "open_host_ports" in methods
    for name in methods:
        wrapper = getattr(DockerRuntime, name)
        assert hasattr(wrapper, "__wrapped__"), name
        assert not hasattr(wrapper.__wrapped__, "__wrapped__"), name


class Rival(DockerRuntime):
    def remove(self, container: str) -> None:  # overrides a part's method
        raise APIError("409 Client Error: removal of container c1 is already in progress")

    def rival_only(self) -> None:  # the subclass's own
        raise DockerException("boom")

    def refused(self) -> None:
        raise BuildFailed("the task's image cannot be had")


class RivalsRival(Rival):
    def rivals_rival_only(self) -> None:
        raise APIError("500 Server Error: boom")


@pytest.mark.parametrize("cls", [Rival, RivalsRival])
def test_a_subclass_s_methods_meet_the_seam_too(cls):
    runtime = cls(engine=FailingEngine(APIError("500 Server Error: the engine")))
    for call in (lambda: runtime.remove("c1"), runtime.rival_only, lambda: runtime.start("c1")):
        with pytest.raises(RuntimeFault) as raised:
            call()
        assert isinstance(raised.value.__cause__, DockerException)  # converted once, not twice
    if cls is RivalsRival:
        with pytest.raises(RuntimeFault):
            runtime.rivals_rival_only()
    with pytest.raises(BuildFailed):  # orchestra's own faults pass unchanged
        runtime.refused()


def test_a_subclass_wraps_only_what_it_defines():
    assert Rival.start is DockerRuntime.start  # inherited: wrapped once, on DockerRuntime
    assert RivalsRival.remove is Rival.remove
    assert set(vars(Rival)) & set(public_methods(Rival)) == {"remove", "rival_only", "refused"}
    for name in public_methods(RivalsRival):
        assert not hasattr(getattr(RivalsRival, name).__wrapped__, "__wrapped__"), name


def test_closing_an_exec_stream_whose_transport_died_neither_raises_nor_skips_a_part():
    """Over ssh:// the tunnel's ssh process can exit with the exec's stream; closing then
    flushes a dead pipe. The exec is over: its close must not turn it into an infra error."""
    from orchestrator.runtime.client import Hijacked

    closed: list[str] = []

    class Dead:
        def __init__(self, name: str):
            self.name = name

        def close(self) -> None:
            closed.append(self.name)
            raise BrokenPipeError(32, "Broken pipe")

    Hijacked(Dead("socket"), Dead("response")).close()  # type: ignore[arg-type]
    assert closed == ["socket", "response"]
