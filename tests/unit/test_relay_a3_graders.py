"""The A.3 relay-native graders: a right answer in the right place passes, the usual
mistakes fail."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import ROOT

LEAD, USER, OTHER = "a" * 64, "b" * 64, "c" * 64


def grader(task: str):
    spec = importlib.util.spec_from_file_location(task, ROOT / f"tasks/relay-native/{task}/tests/verify.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.grade


def evidence(*replies, scripted=()):
    messages = [{"id": "q1", "pubkey": USER, "content": "?", "reply_to_event_id": None,
                 "mentioned_pubkeys": [LEAD], "created_at": 1.0}]
    messages += [{"id": f"s{i}", "pubkey": USER, "content": "?", "reply_to_event_id": None,
                  "mentioned_pubkeys": [], "created_at": 1.5} for i, _ in enumerate(scripted)]
    for i, (content, thread, mentions) in enumerate(replies):
        messages.append({"id": f"a{i}", "pubkey": LEAD, "content": content, "reply_to_event_id": thread,
                         "mentioned_pubkeys": mentions, "created_at": 2.0 + i})
    return {"task_event_id": "q1", "scripted_events": [f"s{i}" for i, _ in enumerate(scripted)],
            "identities": {"lead": {"role": "orchestrator", "pubkey": LEAD},
                           "user": {"role": "user", "pubkey": USER}},
            "messages": messages}


@pytest.mark.parametrize("replies, reward", [
    ([("6 times 7 is 42.", "q1", [USER])], 1.0),
    ([("6 times 7 is 42.", "q1", [])], 0.0),  # no hand-back
    ([("6 times 7 is 42.", None, [USER])], 0.0),  # not in the thread
    ([("It is 48.", "q1", [USER])], 0.0),
])
def test_user_mention(replies, reward):
    assert grader("user-mention")(evidence(*replies))["reward"] == reward


@pytest.mark.parametrize("text, reward", [
    ("Red\nGreen\nBlue", 1.0), ("- red\n- green\n- blue\n", 1.0),
    ("Red\\nGreen\\nBlue", 0.0),  # literal backslash-n
    ("Red, Green, Blue", 0.0), ("Red\nGreen\nYellow", 0.0),
])
def test_multiline_message(text, reward):
    assert grader("multiline-message")(evidence((text, "q1", [])))["reward"] == reward


@pytest.mark.parametrize("replies, reward", [
    ([("5", "q1", []), ("6", "s0", [])], 1.0),
    ([("5 and 6", "q1", [])], 0.0),  # both in one thread
    ([("6", "q1", []), ("5", "s0", [])], 0.0),  # swapped
    ([("5", "q1", [])], 0.0),  # second request unanswered
])
def test_cross_thread_requests(replies, reward):
    assert grader("cross-thread-requests")(evidence(*replies, scripted=["second"]))["reward"] == reward


@pytest.mark.parametrize("text, reward", [
    ("Combined figure: 87", 1.0), ("(17 + 23 - 11) x 3 = 87", 1.0), ("87 or maybe 90", 0.0), ("29", 0.0)])
def test_interleaved_agent_reports(text, reward):
    assert grader("interleaved-agent-reports")(evidence((text, "q1", [])))["reward"] == reward
