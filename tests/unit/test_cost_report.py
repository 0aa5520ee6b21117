"""Tokens and cost as reports say them (issue 59): usage the upstream did not count is said
as estimated, and dollars nobody counted or priced as unknown, never as $0."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from orchestrator.models import ModelUsage, TrialResult
from orchestrator.report.junit import write_junit
from orchestrator.report.tables import tables

DATA = Path(__file__).parent / "data" / "results"


def trial(attempt: int, **usage: int | float) -> TrialResult:
    t = TrialResult.model_validate_json((DATA / "trial-roster.json").read_text())
    t.attempt, t.model = attempt, ModelUsage(**usage)
    t.tokens = t.model.prompt_tokens + t.model.completion_tokens
    t.cost = t.model.cost
    return t


def test_counted_and_priced_usage_is_said_as_such():
    t = tables([trial(1, prompt_tokens=100, completion_tokens=20, counted_prompt_tokens=100,
                      counted_completion_tokens=20, usage_counted_calls=1, cost=0.0004)])
    assert (t.tokens_text, t.cost_text) == ("tokens 120", "cost $0.0004")


def test_estimated_tokens_and_unknown_cost_are_said_never_as_zero_dollars(tmp_path):
    trials = [trial(1, prompt_tokens=3000, completion_tokens=10, estimated_prompt_tokens=3000,
                    estimated_completion_tokens=10, usage_estimated_calls=1, cost_unknown_calls=1),
              trial(2, prompt_tokens=100, completion_tokens=20, counted_prompt_tokens=100,
                    counted_completion_tokens=20, usage_counted_calls=1, cost=0.5)]
    t = tables(trials)
    assert t.tokens_text == "tokens 3130 (3010 estimated: the upstream counted no usage for some calls)"
    assert t.cost_text == "cost unknown (1 trials had calls with no usage or no price; the rest cost $0.5000)"
    write_junit("j", tmp_path, trials, tmp_path / "junit.xml")
    props = [{p.get("name"): p.get("value") for p in case.iter("property")}
             for case in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")]
    assert [p["orchestra.cost_usd"] for p in props] == ["unknown", "0.500000"]
    assert [p["orchestra.tokens_estimated"] for p in props] == ["true", "false"]
