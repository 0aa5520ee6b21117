"""The stand-in rule (issue 25): every base reference the third-party datasets use maps to
the nearest offline base, by parsing, never by an exact-string list."""

import pytest

from orchestrator.tasks.standins import choose, parse_reference
from orchestrator.trial.images import with_stand_ins


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
    ("python:3.13-slim-bookworm", "trixie", "3.13"),  # the python version decides
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
    assert (chosen.warning is not None) == ("@sha256:" in ref)
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
