"""Every branch of the memory-retrieval grader (SPEC-TASKS A.1), plus the task invariants."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tomllib

import pytest
from conftest import ROOT

TASK = ROOT / "tasks/relay-native/memory-retrieval"
spec = importlib.util.spec_from_file_location("mr_verify", TASK / "tests/verify.py")
verify = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verify)

LEAD, USER, OTHER = "a" * 64, "b" * 64, "c" * 64


def evidence(answer: str | None, *, reply_to: str = "q1", author: str = LEAD,
             channel: str = "ch", **overrides) -> dict:
    messages = [{"id": "q1", "pubkey": USER, "channel_id": "ch", "content": "How many?",
                 "reply_to_event_id": None, "created_at": 1.0}]
    if answer is not None:
        messages.append({"id": "a1", "pubkey": author, "channel_id": channel, "content": answer,
                         "reply_to_event_id": reply_to, "created_at": 2.0})
    doc = {"schema_version": 1, "task_name": "memory-retrieval", "truncated": False,
           "task_event_id": "q1", "trial": {"channel_id": "ch", "trial_id": "t", "run_id": "r"},
           "identities": {"lead": {"role": "orchestrator", "pubkey": LEAD},
                          "user": {"role": "user", "pubkey": USER},
                          "helper": {"role": "worker", "pubkey": OTHER}},
           "messages": messages}
    doc.update(overrides)
    return doc


@pytest.mark.parametrize("answer", [
    "352,345", "We had 352,345 total customers in April 2024.", "April 2024 total customers: 352345"])
def test_full_credit_answers(answer):
    scores, details = verify.grade(evidence(answer))
    assert scores == {"answer_correct": 1.0, "threaded_reply": 1.0, "evidence_complete": 1.0,
                      "reward": 1.0}
    assert details["mentions_expected"] is True and details["answer_id"] == "a1"


@pytest.mark.parametrize("answer", [
    "361,250", "351,340", "2400", "325,401", "3,710", "21,604",  # each distractor alone
    "352,344", "352,346", "352,000", "About 352 thousand", "Approximately 352.3 thousand",
    "352,345 or maybe 361,250", "352,345 (up from 351,340)", "352,345 and 17 more",
])
def test_no_credit_answers(answer):
    scores, _ = verify.grade(evidence(answer))
    assert scores["answer_correct"] == 0.0 and scores["reward"] == 0.0
    assert scores["threaded_reply"] == 1.0


def test_distractor_and_noise_are_reported_in_details():
    _, details = verify.grade(evidence("352,345 vs 351,340 and 99"))
    assert details["mentions_distractor"] is True
    assert details["noise_numbers"] == [99.0]
    assert details["parsed_numbers"] == [352345.0, 351340.0, 99.0]
    assert details["distractor_numbers"] == sorted([361250.0, 351340.0, 2400.0, 325401.0, 3710.0, 21604.0])
    assert details["allowed_numbers"] == [2024.0, 352345.0]


@pytest.mark.parametrize("kwargs", [
    {"reply_to": "elsewhere"},  # the right text replying to the wrong message
    {"reply_to": None},  # a top-level post
    {"author": OTHER},  # written by a worker, not the orchestrator
    {"channel": "other-channel"},
])
def test_right_text_in_the_wrong_place_scores_zero(kwargs):
    scores, _ = verify.grade(evidence("352,345", **kwargs))
    assert scores["threaded_reply"] == 0.0 and scores["reward"] == 0.0


def test_the_last_threaded_answer_counts():
    doc = evidence("352,345")
    doc["messages"].append({"id": "a2", "pubkey": LEAD, "channel_id": "ch", "content": "361,250",
                            "reply_to_event_id": "q1", "created_at": 3.0})
    scores, details = verify.grade(doc)
    assert details["answer_id"] == "a2" and scores["reward"] == 0.0


@pytest.mark.parametrize("override", [
    {"schema_version": 2}, {"task_name": "other"}, {"truncated": True}, {"task_event_id": 7},
])
def test_incomplete_evidence_scores_zero(override):
    scores, _ = verify.grade(evidence("352,345", **override))
    assert scores["evidence_complete"] == 0.0 and scores["reward"] == 0.0


def test_two_orchestrators_make_evidence_incomplete():
    doc = evidence("352,345")
    doc["identities"]["helper"]["role"] = "orchestrator"
    assert verify.grade(doc)[0]["reward"] == 0.0


@pytest.mark.parametrize("content", ["not json", "[]", '{"messages": 3}'])
def test_malformed_evidence_gives_zero_with_an_error(tmp_path, content):
    path = tmp_path / "evidence.json"
    path.write_text(content)
    reward, details = tmp_path / "reward.json", tmp_path / "details.json"
    proc = subprocess.run([sys.executable, str(TASK / "tests/verify.py"), "--evidence", str(path),
                           "--reward", str(reward), "--details", str(details)])
    assert proc.returncode == 0
    assert json.loads(reward.read_text())["reward"] == 0.0
    assert "error" in json.loads(details.read_text())


def test_missing_evidence_gives_zero_with_an_error(tmp_path):
    reward, details = tmp_path / "reward.json", tmp_path / "details.json"
    subprocess.run([sys.executable, str(TASK / "tests/verify.py"), "--evidence",
                    str(tmp_path / "none.json"), "--reward", str(reward), "--details", str(details)],
                   check=True)
    assert json.loads(reward.read_text()) == {"reward": 0.0, "answer_correct": 0.0,
                                              "threaded_reply": 0.0, "evidence_complete": 0.0}


# ---- invariants of the task itself ------------------------------------------------------
SEEDS = tomllib.loads((TASK / "memory/seeds.toml").read_text())["seed"]


def test_the_five_slugs_are_exactly_these():
    assert [s["slug"] for s in SEEDS] == [
        "total-customers-per-month", "customer-value-metric", "customers-metrics-spring-24",
        "new-customers-april-2024", "total-customers-metric"]


def test_the_answer_is_in_one_seed_only_and_the_distractors_are_the_others_numbers():
    holding = [s for s in SEEDS if 352345.0 in verify.parse_numbers(s["value"])]
    assert len(holding) == 1
    others = {n for s in SEEDS if s is not holding[0] for n in verify.parse_numbers(s["value"])}
    others.discard(2024.0)
    assert others == set(verify.DISTRACTORS)


def test_the_instruction_does_not_contain_the_answer():
    text = (TASK / "instruction.md").read_text()
    assert "352,345" not in text and "352345" not in text
    assert text.strip() == "How many total customers did we have in April 2024?"
    assert not re.search(r"352\D?345", text)
