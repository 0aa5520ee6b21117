"""A model budget holds per call, not only between calls (issue 45): an agent in a container
asks the key-holding proxy for `n = 1000` choices of `max_tokens = 10^9` each (refused: at
most 8 choices a call, nothing reaches the upstream), then for 8 such choices in Chat
Completions and one in the Messages API (translated to the chat upstream): what reaches the
upstream is capped to what the trial's token budget has left. Before the cap, one such call
billed 524x the budget."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_task
from kit import ChatUpstream, trials_by_task

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.manifest import Manifest
from orchestrator.tasks.load import load_tasks

SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"
BUDGET_TOKENS = 500

# the agent: each call's status and what it asked for, written where the test reads it
GREEDY = r"""touch /app/ok
python3 - <<'PY'
import json, os, urllib.error, urllib.request
base, token = os.environ["ORCHESTRA_MODEL_URL"], os.environ["ORCHESTRA_MODEL_TOKEN"]
calls = [
    ("/chat/completions", {"model": "m", "n": 1000, "max_tokens": 10**9,
                           "messages": [{"role": "user", "content": "everything, a thousand times"}]}),
    ("/chat/completions", {"model": "m", "n": 8, "max_tokens": 10**9,
                           "messages": [{"role": "user", "content": "everything, eight times"}]}),
    ("/messages", {"model": "claude-x", "max_tokens": 10**9,
                   "messages": [{"role": "user", "content": "everything"}]}),
]
sent = []
for path, body in calls:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + token, "x-api-key": token,
                                              "anthropic-version": "2023-06-01",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    sent.append({"path": path, "asked": {k: body[k] for k in ("n", "max_tokens") if k in body}, "status": status})
json.dump(sent, open("/logs/artifacts/sent.json", "w"))
PY
"""


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[Path, list[dict]]]:
    """A chat upstream on loopback that keeps every body it was sent and bills 20 prompt
    and 30 completion tokens a call; its endpoints file."""
    with ChatUpstream(prompt_tokens=20, completion_tokens=30) as chat:
        yield chat.endpoints(tmp_path / "endpoints.json"), chat.bodies


def test_one_call_cannot_spend_past_the_token_budget_in_any_api(runtime, tmp_path, upstream):
    endpoints, bodies = upstream
    make_task(tmp_path / "ds", "greedy", toml=SMALL, solve=GREEDY)
    manifest = Manifest.model_validate({"condition": "budget", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "oracle", "endpoint": "upstream",
         "budget": {"tokens": BUDGET_TOKENS}}]})
    run_job(runtime, load_tasks(tmp_path / "ds"), manifest,
            JobOptions(job_name="greedy-budget", jobs_dir=tmp_path / "jobs", endpoints=load_endpoints([endpoints])))
    result, folder = trials_by_task(tmp_path / "jobs/greedy-budget")["greedy"]
    sent = json.loads((folder / "artifacts/sent.json").read_text())
    # positive control: the agent asked for a thousand, then eight, choices of a billion
    # tokens, and one of a billion in the Messages API
    assert [s["asked"] for s in sent] == [{"n": 1000, "max_tokens": 10**9}, {"n": 8, "max_tokens": 10**9},
                                          {"max_tokens": 10**9}], sent
    assert [s["status"] for s in sent] == [400, 200, 200], sent  # the thousand refused, the others answered
    assert len(bodies) == 2, bodies  # the refused call never reached the upstream
    first, second = bodies
    # the eight choices: the whole budget at most, over all of them
    assert first["n"] * first["max_tokens"] <= BUDGET_TOKENS, first
    # the Messages call (translated to chat): what the first left (500 - 20 - 30 = 450)
    assert second.get("n", 1) * second["max_tokens"] <= BUDGET_TOKENS - 50, second
    assert result.model.calls == 2 and result.model.prompt_tokens == 40 and result.model.completion_tokens == 60
    assert result.model.by_api == {"chat": 1, "messages": 1}, result.model
    assert result.reward == {"reward": 1.0}
