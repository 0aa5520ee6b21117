"""A trial's result has no untyped dict (issue 47 item 3), and result.json files written
before its records were typed still load, read back as typed attributes, in
`TrialResult.model_validate_json`, `orchestra report` and `orchestra view`.

The files under data/results/ are real: result.json files written by the code before the
records were typed (a relay trial of the reference agent on a stood-in base, a roster
trial with two workers, an allowlist trial), and a job's result.json with its memory
shadow. Nothing in them is secret: /tmp paths of the test run that wrote them."""

from __future__ import annotations

import io
import json
import re
import shutil
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli.commands import app
from orchestrator.models.records import ArmShadow, MemoryAudit, MemoryShadow, ModelUsage
from orchestrator.models.result import JobResult, TrialResult, trial_folder_name
from orchestrator.report.load import load_job_result, load_trials
from orchestrator.report.summary import render_job
from orchestrator.services.apis.calls import ProxyCounts
from orchestrator.trial.audit import Audit
from orchestrator.view import pages

DATA = Path(__file__).parent / "data" / "results"
TRIALS = ("trial-relay", "trial-roster", "trial-allowlist")


def load(name: str) -> TrialResult:
    return TrialResult.model_validate_json((DATA / f"{name}.json").read_text())


def test_an_old_relay_trial_reads_back_typed():
    r = load("trial-relay")
    assert r.model is not None and r.model.calls == 4 and r.model.by_api == {"chat": 4}
    assert r.model.prompt_tokens + r.model.completion_tokens == r.tokens == 692
    assert r.model.exchanges_written == 4 and r.model.last_error is None
    assert [s.slug for s in r.memory.engram_seeds][:2] == ["total-customers-per-month", "customer-value-metric"]
    assert all(s.exit_code == 0 and s.via == "mem set <slug> -" for s in r.memory.engram_seeds)
    assert r.memory.complete is True and r.memory.leaks == [] and r.memory.state_home
    assert r.relay is not None and r.relay.message_count == 2 and r.relay.engram_events == 5
    assert r.relay.rejections == [] and r.relay.limit_hits == {} and r.relay.start_sec == 0.0013
    assert r.collected["/logs/agent"].files == 4 and r.collected["/logs/agent"].truncated is False
    (stood,) = r.stand_ins
    assert stood.stand_in == "orchestra/base:bookworm" and stood.python == "3.11" and "NOT" in (stood.warning or "")


def test_an_old_roster_trial_and_an_allowlist_trial_read_back_typed():
    team = load("trial-roster")
    assert [(w.member, w.name, w.exit_code) for w in team.workers] == [
        ("helper", "helper-1", 0), ("helper", "helper-2", 0)]
    assert all(w.model is None and w.disk_limit is False for w in team.workers)
    assert team.model is None  # written {}: the trial had no model proxy
    allow = load("trial-allowlist")
    assert allow.egress is not None and allow.egress.allowed_hosts == ["deb.debian.org"]
    assert allow.egress.allowed == {"deb.debian.org": 4} and allow.egress.refused == {"pypi.org": 4}
    assert team.egress is None


def _kept(old: object, new: object, where: str = "") -> list[str]:
    """Where `new` lost or changed something `old` had (keys `new` adds are allowed: a
    record's defaults are now written out)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [p for k, v in old.items()
                for p in (_kept(v, new[k], f"{where}.{k}") if k in new else [f"{where}.{k}: lost"])]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [p for i, (a, b) in enumerate(zip(old, new, strict=True)) for p in _kept(a, b, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: {old!r} became {new!r}"]


@pytest.mark.parametrize("name", TRIALS)
def test_a_rewritten_old_result_keeps_every_key_and_value(name):
    old = json.loads((DATA / f"{name}.json").read_text())
    new = json.loads(TrialResult.model_validate_json(json.dumps(old)).model_dump_json())
    assert _kept(old, new) == []
    assert set(new) == set(old)  # no field moved: the schema keeps its shape


def test_a_record_never_made_is_written_as_it_always_was():
    r = load("trial-roster")
    written = json.loads(r.model_dump_json())
    assert written["model"] == {} and written["egress"] is None
    r.model = ModelUsage(calls=2)
    assert json.loads(r.model_dump_json())["model"]["calls"] == 2


def test_the_model_counts_hold_every_count_the_proxy_keeps():
    # the result's record is the proxy's counts and more: one class, no copy to drift
    assert issubclass(ModelUsage, ProxyCounts) and set(ProxyCounts.model_fields) <= set(ModelUsage.model_fields)


def test_each_step_s_audit_replaces_the_findings_and_adds_its_leaks():
    memory = MemoryAudit(state_home="/var/tmp/.s-x", fact_files_seeded=2)  # what seeding wrote
    Audit(recall_events=3, markers_used=["M1"], leaks=["read tests/test.sh"]).record_into(memory)
    Audit(recall_events=1, complete=False, incomplete_reason="cut", leaks=["read x"]).record_into(memory)
    assert (memory.recall_events, memory.markers_used, memory.complete) == (1, [], False)
    assert memory.leaks == ["read tests/test.sh", "read x"] and memory.incomplete_reason == "cut"
    assert (memory.state_home, memory.fact_files_seeded) == ("/var/tmp/.s-x", 2)  # the seed's, kept


def test_the_job_result_reads_its_memory_shadow_as_the_model():
    old = json.loads((DATA / "job.json").read_text())
    job = JobResult.model_validate_json(json.dumps(old))
    assert isinstance(job.memory_shadow, MemoryShadow) and job.memory_shadow.recall_events == 1
    assert job.memory_shadow.rows()[0] == ["recall events", "1"]
    assert json.loads(job.model_dump_json())["memory_shadow"] == old["memory_shadow"]
    arm = ArmShadow.model_validate(job.memory_shadow, from_attributes=True)  # compare.json's
    assert json.loads(arm.model_dump_json())["marker_rate"] == "0/0"


@pytest.fixture
def old_job(tmp_path: Path) -> Path:
    """A job folder of the old files: its result.json and the three trials."""
    job_dir = tmp_path / "jobs" / "old"
    job_dir.mkdir(parents=True)
    shutil.copy(DATA / "job.json", job_dir / "result.json")
    for name in TRIALS:
        r = load(name)
        folder = job_dir / "trials" / trial_folder_name(r.task, r.trial_id)
        folder.mkdir(parents=True)
        shutil.copy(DATA / f"{name}.json", folder / "result.json")
    return job_dir


def test_orchestra_report_reads_old_results(old_job):
    done = CliRunner().invoke(app, ["report", str(old_job)], terminal_width=200)
    assert done.exit_code == 0, done.output
    assert re.search(r"Memory shadow\nmetric +value\nrecall events +1\n", done.output), done.output
    assert "Memory shadow" in (old_job / "report.md").read_text() and (old_job / "report.html").is_file()
    # what `orchestra run` prints at the end, from the same results
    console = Console(file=io.StringIO(), width=300)
    render_job(load_job_result(old_job), load_trials(old_job), console)
    said = console.file.getvalue()  # type: ignore[attr-defined]
    assert "FROM python:3.12-slim-bookworm is not on this engine; built on orchestra/base:bookworm" in said
    assert "memory shadow: recall events 1" in said


def test_orchestra_view_shows_old_results(old_job):
    job = pages.load_job(old_job)
    assert job is not None and "Memory shadow" in pages.job_page("old", old_job, job, {})
    relay = next(f for f in (old_job / "trials").iterdir() if f.name.startswith("memory-retrieval"))
    page = pages.trial_page("old", relay)
    assert "&#34;engram_seeds&#34;" in page  # the memory audit, shown (escaped)
    assert "&#34;calls&#34;: 4" in page  # and the model counts


# ---- the rule: no untyped dict on the result --------------------------------------------

def untyped(model: type[BaseModel], seen: set[type] | None = None) -> list[str]:
    """Every field, of `model` and of the models its fields hold, whose annotation is a bare
    `dict` or `list`, or a dict or list of `dict`, `Any` or `object`."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    found = []
    for name, info in model.model_fields.items():
        for problem in _loose(info.annotation):
            found.append(f"{model.__name__}.{name}: {problem}")
        for inner in _models(info.annotation):
            found += untyped(inner, seen)
    return found


def _loose(annotation: object) -> list[str]:
    if annotation in (dict, list, typing.Any, object):
        return [f"untyped {annotation!r}"]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _loose(args[0])
    if origin in (dict, list) and any(a in (dict, list, typing.Any, object) for a in args):
        return [f"untyped values in {annotation!r}"]
    return [p for a in args for p in _loose(a)]


def _models(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def test_no_field_of_a_trial_or_job_result_is_an_untyped_dict():
    assert untyped(TrialResult) == []
    assert untyped(JobResult) == []


def test_the_rule_catches_an_untyped_dict_even_nested():
    class Inner(BaseModel):
        extra: list[dict] = []

    class Loose(BaseModel):
        counts: dict[str, int] = {}  # typed: allowed
        blob: dict = {}
        nested: Inner | None = None
        anything: dict[str, typing.Any] = {}

    assert untyped(Loose) == ["Loose.blob: untyped <class 'dict'>",
                              "Inner.extra: untyped values in list[dict]",
                              "Loose.anything: untyped values in dict[str, typing.Any]"]
