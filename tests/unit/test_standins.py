"""The stand-in rule (issue 25): every base reference the third-party datasets use maps to
the nearest offline base, by parsing, never by an exact-string list."""

import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from orchestrator.runtime.base import LABEL_IMAGE_KIND, ImageFacts, PulledImage, PullFailed
from orchestrator.runtime.docker.images import split_reference, unreachable
from orchestrator.tasks.standins import choose, parse_reference
from orchestrator.trial.baseimage import BASE_VERSION, LABEL_BASE_VERSION
from orchestrator.trial.bases import BaseBuildFailed, resolve_bases, with_stand_ins


@pytest.mark.parametrize("ref, release, python", [
    ("python:3.13-slim", "trixie", "3.13"),
    ("python:3.12.8-slim", "bookworm", "3.11"),
    ("python:3.12.9-slim", "bookworm", "3.11"),
    ("python:3.9.19-slim", "bullseye", "3.9"),
    ("python:3.11-slim", "bookworm", "3.11"),
    ("public.ecr.aws/docker/library/python:3.11-slim", "bookworm", "3.11"),
    ("docker.io/library/python:3.10", "bullseye", "3.9"),
    ("python:3.11-slim-bookworm@sha256:" + "a" * 64, "bookworm", "3.11"),
    ("debian:bookworm-slim@sha256:" + "b" * 64, "bookworm", "3.11"),
    ("python:3.13-slim-bookworm", "bookworm", "3.11"),  # the tag's release decides, said below
    ("python:3.11-slim-bookworm", "bookworm", "3.11"),
    ("python:3.9.19-slim-bookworm", "bookworm", "3.11"),
    ("python:3", "trixie", "3.13"),
    ("python", "trixie", "3.13"),
    ("ubuntu:24.04", "trixie", "3.13"),
    ("ubuntu:22.04", "bookworm", "3.11"),
    ("ubuntu:jammy", "bookworm", "3.11"),
    ("ubuntu:20.04", "bullseye", "3.9"),
    ("debian:13.0-slim", "trixie", "3.13"),
    ("debian:12", "bookworm", "3.11"),
    ("debian:bullseye", "bullseye", "3.9"),
    ("debian:buster-slim", "bullseye", "3.9"),
    ("debian:latest", "trixie", "3.13"),
    ("buildpack-deps:bookworm-scm", "bookworm", "3.11"),
    ("localhost:5000/python:3.11", "bookworm", "3.11"),
    ("ghcr.io/laude-institute/t-bench/ubuntu-24-04", "trixie", "3.13"),
    ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "trixie", "3.13"),
])
def test_each_reference_gets_the_nearest_release(ref, release, python):
    chosen = choose(ref)
    assert chosen is not None and (chosen.release, chosen.python) == (release, python), chosen
    assert chosen.stand_in == f"orchestra/base:{release}" and chosen.reason
    asked = re.match(r"(?:.*/)?python[:-](\d+)[.-](\d+)", ref)
    python_unlike = asked is not None and f"{asked.group(1)}.{asked.group(2)}" != python
    assert (chosen.warning is not None) == ("@sha256:" in ref or python_unlike), chosen
    if python_unlike:  # whatever chose the release, a python the tag does not name is said
        assert f"python {python}, NOT the python {asked.group(1)}.{asked.group(2)} the tag names" in chosen.warning
    if "ubuntu" in ref:
        assert "not Debian" in chosen.reason  # said plainly
    if "ghcr.io" in ref:
        assert "a guess from the image's name" in chosen.reason


@pytest.mark.parametrize("ref", ["python:3.12-alpine", "alpine:3.20", "node:20-bookworm", "golang:1.22",
                                 "mcr.microsoft.com/windows/servercore:ltsc2022", "ghcr.io/org/tool:1"])
def test_no_stand_in_where_none_is_near(ref):
    assert choose(ref) is None


def test_parsing_names_registry_repository_tag_and_digest():
    r = parse_reference("registry.example.com:5000/team/python:3.12@sha256:" + "c" * 64)
    assert (r.registry, r.repository, r.tag) == ("registry.example.com:5000", "team/python", "3.12")
    assert r.digest == "sha256:" + "c" * 64
    assert parse_reference("library/debian").repository == "debian"
    assert parse_reference("debian").tag == "latest"


def test_the_dockerfile_names_the_stand_in_and_nothing_else_changes():
    chosen = choose("python:3.12.9-slim")
    text = ("FROM --platform=linux/amd64 python:3.12.9-slim AS build\nRUN echo python:3.12.9-slim\n"
            "FROM build\nFROM debian:bookworm\n")
    out = with_stand_ins(text, [chosen])
    assert out.splitlines() == ["FROM --platform=linux/amd64 orchestra/base:bookworm AS build",
                                "RUN echo python:3.12.9-slim", "FROM build", "FROM debian:bookworm"]


# ---- resolving a FROM: the engine's image, else a pull (once per job), else a stand-in ----

class FakeEngine:
    """The two things resolve_bases asks of an engine: what it has, and a pull (which
    counts, and fails as told: `unreachable` names, `refused` names; the rest succeed)."""

    def __init__(self, have: dict[str, ImageFacts] | None = None, unreachable: tuple[str, ...] = (),
                 refused: tuple[str, ...] = ()):
        base = ImageFacts(id="sha256:base", tags=["orchestra/base:bookworm"], layers=1,
                          labels={LABEL_IMAGE_KIND: "base", LABEL_BASE_VERSION: BASE_VERSION})
        self.have = {"orchestra/base:bookworm": base, "orchestra/base:trixie": base, **(have or {})}
        self.unreachable, self.refused = unreachable, refused
        self.pulls: list[str] = []
        self.lock = threading.Lock()

    def image_exists(self, ref: str) -> bool:
        return ref in self.have

    def image_facts(self, ref: str) -> ImageFacts:
        if ref not in self.have:
            raise KeyError(ref)
        return self.have[ref]

    def pull(self, ref: str, timeout_sec: float = 600) -> PulledImage:
        with self.lock:
            self.pulls.append(ref)
        time.sleep(0.01)  # long enough for other threads to ask meanwhile
        if ref in self.unreachable:
            raise PullFailed(f"pull {ref}: dial tcp: lookup registry-1.docker.io: no such host", True)
        if ref in self.refused:
            raise PullFailed(f"pull {ref}: manifest unknown", False)
        self.have[ref] = ImageFacts(id=f"sha256:{ref}", digests=[f"{ref.split(':')[0]}@sha256:d"])
        return PulledImage(ref=ref, id=f"sha256:{ref}", digest="sha256:d")


def _job() -> str:
    return f"unit-{uuid.uuid4().hex[:8]}"


def test_a_reference_is_pulled_once_per_job_and_a_failed_pull_is_not_retried():
    engine, job = FakeEngine(unreachable=("python:3.11-slim",)), _job()
    text = "FROM python:3.12-slim\nFROM python:3.11-slim\n"
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: resolve_bases(engine, text, job), range(16)))
    assert sorted(engine.pulls) == ["python:3.11-slim", "python:3.12-slim"]
    for pulled, stood in results:
        assert (pulled.record.source, pulled.record.digest, pulled.stand_in) == ("pulled", "sha256:d", None)
        assert stood.record.source == "stand-in" and stood.stand_in is not None
        assert "no such host" in (stood.record.pull_error or "") and "the pull failed" in (stood.record.reason or "")
    resolve_bases(engine, text, _job())  # another job: the failed reference is tried again
    assert engine.pulls.count("python:3.11-slim") == 2 and engine.pulls.count("python:3.12-slim") == 1


def test_offline_never_pulls_pull_mode_and_a_refusal_are_build_failures():
    engine = FakeEngine(unreachable=("python:3.11-slim",), refused=("python:3.10-slim",))
    [stood] = resolve_bases(engine, "FROM python:3.12-slim\n", _job(), mode="offline")
    assert engine.pulls == [] and stood.record.source == "stand-in" and "--bases offline" in stood.record.reason
    with pytest.raises(BaseBuildFailed) as failed:
        resolve_bases(engine, "FROM python:3.11-slim\n", _job(), mode="pull")
    assert failed.value.failure.reference == "python:3.11-slim" and failed.value.failure.stand_in is None
    assert [b.source for b in failed.value.bases] == ["failed"]
    with pytest.raises(BaseBuildFailed, match="a registry answered and refused"):  # auto: no stand-in either
        resolve_bases(engine, "FROM python:3.10-slim\n", _job())
    with pytest.raises(BaseBuildFailed, match="no offline base is near enough"):
        resolve_bases(FakeEngine(unreachable=("alpine:3",)), "FROM alpine:3\n", _job())


def test_an_image_built_from_the_base_is_the_engines_own_not_an_alias_of_the_base():
    inherited = {LABEL_IMAGE_KIND: "base", LABEL_BASE_VERSION: BASE_VERSION}
    mine = ImageFacts(id="sha256:mine", tags=["python:3.12.11-slim-bookworm"], layers=2, labels=inherited)
    alias = ImageFacts(id="sha256:old", tags=["python:3.11-slim-bookworm"], layers=1, labels=inherited)
    engine = FakeEngine(have={"python:3.12.11-slim-bookworm": mine, "python:3.11-slim-bookworm": alias},
                        unreachable=("python:3.11-slim-bookworm",))
    [used] = resolve_bases(engine, "FROM python:3.12.11-slim-bookworm\n", _job())
    assert (used.record.source, used.record.image_id, used.stand_in) == ("local", "sha256:mine", None)
    [old] = resolve_bases(engine, "FROM python:3.11-slim-bookworm\n", _job())  # an alias an older orchestra made
    assert old.record.source == "stand-in" and engine.pulls == ["python:3.11-slim-bookworm"]


@pytest.mark.parametrize("reason, expected", [
    ('Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.0.0.53:53: no such host', True),
    ('Get "http://127.0.0.1:5999/v2/": dial tcp 127.0.0.1:5999: connect: connection refused', True),
    ("x509: certificate signed by unknown authority", True),
    ("manifest for python:3.99 not found: manifest unknown: manifest unknown", False),
    ("pull access denied for org/private, repository does not exist or may require 'docker login'", False),
])
def test_a_pull_that_reached_no_registry_is_told_from_a_refusal(reason, expected):
    assert unreachable(reason) is expected


def test_references_split_as_docker_pull_reads_them():
    assert split_reference("python:3.12-slim") == ("python", "3.12-slim", "python:3.12-slim")
    assert split_reference("127.0.0.1:5000/team/img") == ("127.0.0.1:5000/team/img", "latest",
                                                           "127.0.0.1:5000/team/img:latest")
    digest = "sha256:" + "e" * 64
    assert split_reference(f"debian:bookworm-slim@{digest}") == ("debian", digest, f"debian@{digest}")


def test_every_container_a_trial_makes_is_given_its_trust():
    """The CA bundle reaches every container of a trial: each ContainerSpec made under
    orchestrator/trial is passed through Trust.container, or given the trial's trust.env and
    trust.binds. Since issue 47 one builder (Sandbox.container) makes them all; a new
    ContainerSpec made beside it that is not trusted fails here (tests/unit/test_trial_containers.py
    reads back what each kind of container got)."""
    import ast
    from pathlib import Path

    import orchestrator.trial as trial_package

    folder = Path(trial_package.__file__).parent
    found, untrusted = 0, []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text())
        wrapped = {id(node.args[0]) for node in ast.walk(tree)
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and node.func.attr == "container" and node.args}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ContainerSpec"):
                continue
            found += 1
            given = {kw.arg: ast.unparse(kw.value) for kw in node.keywords}
            merged = "trust.env" in given.get("env", "") and "trust.binds" in given.get("read_only_binds", "")
            if id(node) not in wrapped and not merged:
                untrusted.append(f"{path.name}:{node.lineno}")
    assert found >= 1 and untrusted == [], untrusted
