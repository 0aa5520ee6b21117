"""The smaller findings of issue 56's audit, each as it was found: a task name that reorders
or hides text (bidi controls) or reads as a path (a leading '/'); FIFOs and device nodes left
out of the content hash; an 8-11 character secret kept where a word character touches it;
`ARG BASE=... / FROM ${BASE}` taken for the reference `${BASE}`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import make_task

from orchestrator import scrub
from orchestrator.errors import InputError
from orchestrator.models import name_problem
from orchestrator.models.result import TrialResult
from orchestrator.tasks import StandIn
from orchestrator.tasks.load import hash_tree, load_task
from orchestrator.trial import base_references
from orchestrator.trial.bases import with_stand_ins

DATA = Path(__file__).parent / "data" / "results"


# ---- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, fragment", [
    ("ds/\u202etxt.exe", "U+202E"),  # right-to-left override: 'exe.txt' shown
    ("ds/a\u200bb", "U+200B"),  # zero-width space: two names that look the same
    ("ds/\u2066x\u2069", "U+2066"),
    ("/etc/passwd", "empty part"),
    ("ds//t", "empty part"),
    ("ds/t/", "empty part"),
])
def test_a_task_name_that_hides_or_reorders_text_or_reads_as_a_path_is_refused(tmp_path, name, fragment):
    task = make_task(tmp_path, "t", toml=f'[task]\nname = "{name}"\n')
    with pytest.raises(InputError) as caught:
        load_task(task)
    said = "\n".join(caught.value.problems)
    assert "task.toml" in said and "task.name" in said and fragment in said
    assert name_problem("ds/plain-name_1.0") is None and name_problem("caf\u00e9/t\u00e2che") is None


# ---- the content hash ----------------------------------------------------------------------


def test_a_fifo_changes_the_content_hash_and_is_refused_at_load(tmp_path):
    """Before: hash_tree skipped what is neither a file nor a link: a folder with a FIFO
    hashed as the folder without it (the doctor's cache and the gate match by that hash)."""
    plain = make_task(tmp_path / "a", "t")
    with_fifo = make_task(tmp_path / "b", "t")
    os.mkfifo(with_fifo / "environment" / "pipe")
    assert hash_tree(plain) != hash_tree(with_fifo)
    with pytest.raises(InputError) as caught:
        load_task(with_fifo)
    said = "\n".join(caught.value.problems)
    assert "environment/pipe" in said and "FIFO" in said


# ---- secrets -------------------------------------------------------------------------------


def test_a_short_secret_touching_a_word_character_is_scrubbed():
    """An agent leaked an 8-11 character secret by writing a letter before it ('x<secret>'):
    whole-token matching kept it."""
    secret = "k3y-8chr"
    text = f"x{secret} {secret}y {secret}_2 {secret[::-1]}z KEY={secret}"
    out = scrub.scrub_text(text, [secret])
    assert secret not in out and secret[::-1] not in out and out.count(scrub.REDACTED) == 5
    assert scrub.found_in(f"echo x{secret}y", [secret]) == [secret]


# ---- FROM ${ARG} ---------------------------------------------------------------------------


def test_a_from_reference_reads_its_global_args():
    dockerfile = ("ARG BASE=python:3.12-slim\nARG TAG=22.04\nARG EMPTY\n"
                  "FROM ${BASE} AS build\nFROM ubuntu:$TAG\nARG LATE=nope\n"
                  "FROM ${EMPTY:-debian:bookworm}\nFROM build\nFROM ${LATE:-alpine:3}\n")
    assert base_references(dockerfile) == ["python:3.12-slim", "ubuntu:22.04", "debian:bookworm", "alpine:3"]
    swapped = with_stand_ins(dockerfile, [StandIn(reference="python:3.12-slim", stand_in="orchestra/base:bookworm",
                                                  release="bookworm", python="3.11", reason="offline")])
    assert "FROM orchestra/base:bookworm AS build\n" in swapped and "FROM ubuntu:$TAG\n" in swapped
    assert base_references("ARG V=3.12\nARG BASE=python:${V}-slim\nFROM ${BASE}\n") == ["python:3.12-slim"]
    assert base_references("ARG NOPE\nFROM $NOPE\n") == ["$NOPE"]  # nothing to read: as written
    started = time.monotonic()
    assert base_references("ARG " + "a" * 1_000_000 + "\nFROM $a\n") == ["$a"]
    assert time.monotonic() - started < 5  # hang guard: shlex took 8.9 s over this 1 MB word


# ---- names from a job folder made elsewhere: shown, never obeyed ------------------------------

RLO_NAME = "ds/\u202egnp.exe"  # shows as ds/exe.png


def test_report_md_junit_and_the_terminal_show_a_bidi_control_as_its_code_point(tmp_path):
    """A job folder made elsewhere holds any name; report.html showed [U+202E] already, but
    report.md, the terminal and JUnit wrote the control raw (the name shown reversed)."""
    import io

    from rich.console import Console

    from orchestrator.cli.app import print_table
    from orchestrator.report.junit import write_junit
    from orchestrator.report.render import md_cell

    assert md_cell(RLO_NAME) == "ds/[U+202E]gnp.exe"
    raw = json.loads((DATA / "trial-relay.json").read_text())
    trial = TrialResult.model_validate({**raw, "task": RLO_NAME})
    write_junit("suite\u2066", tmp_path, [trial], tmp_path / "junit.xml")
    xml = (tmp_path / "junit.xml").read_text()
    assert "\u202e" not in xml and "\u2066" not in xml and "[U+202E]gnp.exe" in xml
    for terminal in (False, True):
        out = io.StringIO()
        print_table(Console(file=out, force_terminal=terminal, width=200), "Per task", ["task"], [[RLO_NAME]])
        assert "\u202e" not in out.getvalue() and "[U+202E]gnp.exe" in out.getvalue()


# ---- compose network options: said, never silently dropped ------------------------------------


def test_compose_network_options_orchestra_does_not_apply_are_said(tmp_path):
    """Every service is on the trial's one network: a driver, ipam, aliases or a fixed
    address were accepted and dropped without a word (the README says nothing is ignored)."""
    from orchestrator.tasks.compose import load_compose

    path = tmp_path / "task/environment/docker-compose.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("services:\n  main: {}\n  db:\n    image: redis:7\n    networks:\n      back:\n"
                    "        aliases: [database]\n        ipv4_address: 10.9.0.5\n"
                    "networks:\n  back:\n    driver: overlay\n    internal: true\n  plain: {}\n")
    notes = load_compose(path).notes
    for field in ("networks.back.driver", "networks.back.internal", "services.db.networks.back.aliases",
                  "services.db.networks.back.ipv4_address"):
        assert any(f"{field}: not applied" in n and "one network" in n for n in notes), (field, notes)
    assert not any("networks.plain" in n for n in notes)
