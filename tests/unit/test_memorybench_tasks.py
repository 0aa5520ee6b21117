"""memorybench graders: pristine (the untouched seed fails), witness (an answer derived
from the task's own facts passes), and the suite's invariants (SPEC-TASKS B)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from orchestrator.tasks.load import load_tasks

SUITE = ROOT / "tasks" / "memorybench"
TASKS = sorted(p.name for p in SUITE.iterdir() if (p / "task.toml").is_file())


def grade(task: str, workdir: Path) -> int:
    return subprocess.run([sys.executable, str(SUITE / task / "tests/grade.py")],
                          env={**os.environ, "MB_WORKDIR": str(workdir)}, capture_output=True).returncode


def seeded(task: str, tmp_path: Path) -> Path:
    workdir = tmp_path / "app"
    if (SUITE / task / "workdir").is_dir():
        shutil.copytree(SUITE / task / "workdir", workdir)
    else:
        workdir.mkdir()
    return workdir


def facts_text(task: str) -> str:
    return "\n".join(p.read_text() for p in (SUITE / task / "memory").rglob("*.md"))


# Each witness writes what the task's facts say, as a person reading them would.
WITNESS = {
    "mb-exact": lambda w: (w / "answer.txt").write_text("make check-fast --tag=MEMKEY-EXACT7Q\n"),
    "mb-paraphrase": lambda w: (w / "answer.txt").write_text("pnpm install --tag=MEMKEY-PARA3X\n"),
    "mb-cjk": lambda w: (w / "MEMKEY-CJK5T-add-email.sql").write_text(""),
    "mb-symbol": lambda w: (w / "policy/retry.toml").write_text(
        (w / "policy/retry.toml").read_text().replace("max_backoff_ms = 4000", "max_backoff_ms = 250")),
    "mb-distractor": lambda w: (w / "answer.txt").write_text("make check-fast --tag=MEMKEY-DIST5Q\n"),
    "mb-conflict": lambda w: (w / "answer.txt").write_text("eu-central-1\n"),
    "mb-stale": lambda w: (w / "answer.txt").write_text((w / "RELEASE").read_text()),
    "mb-contradiction": lambda w: (w / "answer.txt").write_text("pnpm install\n"),
    "mb-generic": lambda w: (w / "util.py").write_text((w / "util.py").read_text()
                                                       + "\n\ndef add(a, b):\n    return a + b\n"),
    "mb-history": lambda w: (w / "answer.txt").write_text(
        next(line for line in (w / "config/server.conf").read_text().splitlines()
             if line.startswith("timeout_seconds")) + "\n"),
    "mb-update": lambda w: (w / "answer.txt").write_text("https://api.v2.example\n"),
    "mb-pin": lambda w: (w / "notes.txt").write_text("# MEMKEY-PIN4D\nhello\n"),
}
# The literal each witness relies on, which must come from the task's facts or workdir.
DERIVED_FROM = {
    "mb-exact": "make check-fast --tag=MEMKEY-EXACT7Q", "mb-paraphrase": "pnpm install --tag=MEMKEY-PARA3X",
    "mb-cjk": "MEMKEY-CJK5T-", "mb-symbol": "max_backoff_ms", "mb-distractor": "make check-fast --tag=MEMKEY-DIST5Q",
    "mb-conflict": "eu-central-1", "mb-contradiction": "pnpm install", "mb-update": "https://api.v2.example",
    "mb-pin": "# MEMKEY-PIN4D",
}


def test_the_suite_has_the_twelve_tasks():
    assert TASKS == sorted(["mb-exact", "mb-paraphrase", "mb-cjk", "mb-symbol", "mb-distractor",
                            "mb-conflict", "mb-stale", "mb-contradiction", "mb-generic",
                            "mb-history", "mb-update", "mb-pin"])
    classes = {t.short_name: t.config.metadata.scenario_class for t in load_tasks(SUITE)}
    assert classes["mb-pin"] == "pinned" and classes["mb-cjk"] == "cjk"


@pytest.mark.parametrize("task", TASKS)
def test_pristine_every_grader_fails_on_the_untouched_seed(task, tmp_path):
    assert grade(task, seeded(task, tmp_path)) == 1


@pytest.mark.parametrize("task", TASKS)
def test_witness_every_grader_accepts_an_answer_from_the_facts(task, tmp_path):
    if task in DERIVED_FROM:
        assert DERIVED_FROM[task] in facts_text(task)
    workdir = seeded(task, tmp_path)
    WITNESS[task](workdir)
    assert grade(task, workdir) == 0


@pytest.mark.parametrize("task, wrong", [
    ("mb-conflict", "eu-central-1 (not us-east-1)\n"), ("mb-stale", "release/1.21 not release/0.9\n"),
    ("mb-contradiction", "pnpm install\nnpm install\n"), ("mb-update", "https://api.v2.example, was https://api.v1.example\n"),
    ("mb-exact", "make check-fast --tag=MEMKEY-DIST5Q\n"),
])
def test_forbidden_answers_fail(task, wrong, tmp_path):
    workdir = seeded(task, tmp_path)
    (workdir / "answer.txt").write_text(wrong)
    assert grade(task, workdir) == 1


def test_a_forbidden_pattern_is_never_inside_the_required_one():
    pairs = [("pnpm install", re.compile(r"(?<!p)npm install")), ("eu-central-1", re.compile("us-east-1")),
             ("release/1.21", re.compile(r"release/0\.9")), ("https://api.v2.example", re.compile(r"https://api\.v1\.example"))]
    for required, forbidden in pairs:
        assert not forbidden.search(required)


def test_mb_distractor_has_exactly_the_100_noise_facts():
    topics = ["cache eviction tuning", "logo color palette", "office wifi setup", "sprint retro cadence",
              "docker registry mirror", "S3 bucket lifecycle", "oncall rotation", "email templates",
              "font licensing", "meeting notes location"]
    folder = SUITE / "mb-distractor/memory/project"
    noise = sorted(folder.glob("distractor-*.md"))
    assert [p.name for p in noise] == [f"distractor-{n:03d}.md" for n in range(100)]
    for n, path in enumerate(noise):
        text = path.read_text()
        assert f"name: distractor-{n:03d}\n" in text
        assert f"description: Note about {topics[n % 10]} #{n}\n" in text
        assert f"Historical note #{n} about {topics[n % 10]}. It has no bearing on build or check commands." in text
        assert "MEMKEY" not in text
    holders = [p.name for p in folder.glob("*.md") if "MEMKEY-DIST5Q" in p.read_text()]
    assert holders == ["fast-check-command.md"]


def _frontmatter_keys(text: str) -> list[str]:
    head = text.split("---\n")[1]
    return [line.split(":")[0] for line in head.splitlines() if line and not line.startswith(" ")]


def test_the_real_fact_is_shaped_exactly_like_the_noise():
    """Nothing but content tells the real fact apart: the same frontmatter keys as every
    noise fact (no `keywords`), and mb-exact's fact differs from it only by its marker."""
    folder = SUITE / "mb-distractor/memory/project"
    shapes = {tuple(_frontmatter_keys(p.read_text())) for p in folder.glob("*.md")}
    assert shapes == {("name", "description", "metadata")}
    real = (folder / "fast-check-command.md").read_text()
    exact = (SUITE / "mb-exact/memory/project/fast-check-command.md").read_text()
    assert exact.replace("MEMKEY-EXACT7Q", "MEMKEY-DIST5Q") == real


def test_the_committed_suite_is_what_the_generator_writes(tmp_path):
    before = {p.relative_to(SUITE): p.read_bytes() for p in SUITE.rglob("*") if p.is_file()
              and "__pycache__" not in p.parts}
    subprocess.run([sys.executable, str(SUITE / "generate.py")], check=True)
    after = {p.relative_to(SUITE): p.read_bytes() for p in SUITE.rglob("*") if p.is_file()
             and "__pycache__" not in p.parts}
    assert before == after
