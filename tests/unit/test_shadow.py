"""The memory shadow: the V2 shadow retriever, the audit's agreement count, the job's x/N
row, and compare pairing only trials of the same task content."""

from __future__ import annotations

import json
import sys

from conftest import ROOT

from orchestrator.job.shadow import memory_shadow
from orchestrator.models.result import JobResult, TrialSummary
from orchestrator.report.compare import compare, to_markdown
from orchestrator.trial.audit import audit_trajectory

sys.path.insert(0, str(ROOT / "images/agent-stack/lib"))
import orchestra_memory as memory  # noqa: E402

FACTS = [
    {"id": "deploy-window", "scope": "project", "meta": {"description": "when deploys may run"},
     "body": "Deploys run only on Tuesdays between 10:00 and 12:00 UTC."},
    {"id": "cache-flag", "scope": "project", "meta": {"description": "the cache flag"},
     "body": "Pass --no-cache to the build when the lockfile changed."},
]


def test_the_shadow_retriever_scores_on_its_own_and_finds_the_fact():
    assert memory.shadow_top1("when can I deploy on tuesday", FACTS) == "deploy-window"
    assert memory.shadow_top1("lockfile changed: which build flag?", FACTS) == "cache-flag"
    assert memory.shadow_top1("", FACTS) is None and memory.shadow_top1("deploy", []) is None


def recall(top1, shadow, hits=1):
    return {"memory_recall": {"hits": [{"id": top1}] * hits, "used_chars": 10, "suppressed": 0,
                              "top1": top1, "shadow": {"retriever": "trigram-cosine-v2", "top1": shadow}}}


def test_the_audit_counts_agreement_where_either_retriever_found_something(tmp_path):
    path = tmp_path / "t.jsonl"
    records = [recall("a", "a"), recall("a", "b"), recall(None, None, hits=0),
               {"memory_recall": {"hits": [], "used_chars": 0, "suppressed": 0}}]  # no shadow
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    audit = audit_trajectory(path, [], ["MK-1"], markers_in_prefix=False)
    assert (audit.recall_events, audit.shadow_events, audit.shadow_agree, audit.markers) == (4, 2, 1, 1)


def summary(task, attempt=0, content="h", **kw) -> TrialSummary:
    return TrialSummary(trial_id=f"{task}{attempt}", task=task, attempt=attempt, reward=kw.pop("reward", 1.0),
                        failure_mode="none", content_hash=content, **kw)


def test_the_job_row_has_x_over_n_and_the_agreement_rate():
    trials = [summary("a", recall_events=1, hits=2, markers=1, marker_used=True, shadow_events=1, shadow_agree=1),
              summary("b", recall_events=1, hits=1, markers=1, marker_used=False, shadow_events=1, shadow_agree=0),
              summary("c", markers=0)]
    shadow = memory_shadow(trials)
    assert shadow.marker_rate == "1/2" and shadow.agreement == 0.5
    assert shadow.hits == 3 and ["top-1 agreement, primary vs V2 shadow", "50% (1/2)"] in shadow.rows()
    assert memory_shadow([summary("x")]) is None  # no recall, no markers: no section


def job(name, policy, trials) -> JobResult:
    return JobResult(job=name, condition="c", condition_hash="h", agent="a", policy=policy, k=1,
                     n_trials=len(trials), trials=trials)


def test_compare_pairs_only_the_same_task_content_and_says_why_not():
    on = job("on", "memory-on", [summary("a", recall_events=1, markers=1, marker_used=True),
                                 summary("b", content="new", recall_events=1), summary("c", recall_events=1)])
    off = job("off", "memory-off", [summary("a", reward=0.0), summary("b", content="old"), summary("d")])
    report = compare(on, off)
    assert report.paired == 1
    assert report.unpaired_reasons == {"b#0": "the task's content differs between the two jobs",
                                          "c#0": "ran only in on", "d#0": "ran only in off"}
    assert report.memory_shadow and (on_shadow := report.memory_shadow["on"]) and on_shadow.marker_rate == "1/1"
    text = to_markdown(report)
    assert "- not paired: b#0: the task's content differs" in text and "## Memory shadow" in text


def test_a_piped_run_prints_every_task_name_whole_and_a_narrow_terminal_drops_timings_first():
    import io

    from rich.console import Console

    from orchestrator.models.result import TrialResult
    from orchestrator.report.summary import render_job

    name = "a-dataset/" + "very-long-task-name-" * 4 + "end"
    trial = TrialResult.model_validate({"trial_id": "t" * 64, "job": "j", "task": name, "task_path": "/x",
                                        "content_hash": "h", "condition": "c", "condition_hash": "h",
                                        "agent_id": "lead", "agent": "oracle", "attempt": 0,
                                        "reward": {"reward": 1.0}})
    result = job("j", "memory-on", [summary(name)])
    piped = io.StringIO()
    render_job(result, [trial], Console(file=piped, width=60))  # not a terminal
    assert name in piped.getvalue()
    narrow = io.StringIO()
    render_job(result, [trial], Console(file=narrow, width=120, force_terminal=True))
    text = narrow.getvalue()
    assert name in text and "verify s" not in text  # the name whole, the timing columns gone
