"""ATIF, Harbor's Agent Trajectory Interchange Format (its RFC 0001, v1.7), as orchestra
writes it: every trial's `agent/trajectory.atif.json` (DESIGN 3.6).

Our own models of the parts we write (text content only: no images or audio), with the
spec's rules that a document must keep: step ids run 1, 2, 3...; only agent steps carry a
model, reasoning, tool calls or metrics; an observation's `source_call_id` names a tool call
of its own step; an agent step with `llm_call_count == 0` (a deterministic dispatch, e.g.
the oracle running solve.sh) has no metrics or reasoning; at least one step. Every model
forbids unknown keys, as Harbor's do. Harbor's own models are the judge: a test validates
real trials' files with them (tests/integration/test_atif_harbor.py), installed apart, never
imported here.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION: Literal["ATIF-v1.7"] = "ATIF-v1.7"
FILE_NAME = "trajectory.atif.json"  # in the trial's agent/ folder, next to trajectory.jsonl
_SURROGATE = re.compile("[\ud800-\udfff]")  # no UTF-8 for these: an agent's broken text


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Agent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None  # OpenAI function-calling shape
    extra: dict[str, Any] | None = None


class ToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class ObservationResult(_Strict):
    source_call_id: str | None = None
    content: str | None = None
    extra: dict[str, Any] | None = None


class Observation(_Strict):
    results: list[ObservationResult]


class Metrics(_Strict):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    extra: dict[str, Any] | None = None


class Step(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None  # ISO 8601
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    message: str
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso(cls, value: str | None) -> str | None:
        if value is not None:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value

    @model_validator(mode="after")
    def _agent_only(self) -> Step:
        if self.source != "agent":
            for name in ("model_name", "reasoning_content", "tool_calls", "metrics"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is only for agent steps (this one is {self.source})")
        if self.source == "agent" and self.llm_call_count == 0 and (
                self.metrics is not None or self.reasoning_content is not None):
            raise ValueError("a step with llm_call_count 0 has no metrics or reasoning")
        calls = {c.tool_call_id for c in self.tool_calls or []}
        for result in self.observation.results if self.observation else []:
            if result.source_call_id is not None and result.source_call_id not in calls:
                raise ValueError(f"source_call_id {result.source_call_id!r} is not a tool call of "
                                 f"step {self.step_id}")
        return self


class FinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class Trajectory(_Strict):
    schema_version: Literal["ATIF-v1.7"] = SCHEMA_VERSION
    session_id: str | None = None
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _step_ids(self) -> Trajectory:
        for index, step in enumerate(self.steps, start=1):
            if step.step_id != index:
                raise ValueError(f"steps[{index - 1}].step_id is {step.step_id}, not {index}")
        return self

    def to_json(self) -> str:
        """The document as written: indented, absent fields left out (as Harbor writes it),
        and always JSON that any reader parses: what an agent wrote that UTF-8 or JSON
        cannot hold (a lone surrogate, NaN, infinity) is replaced (U+FFFD, null)."""
        return json.dumps(_writable(self.model_dump(mode="python", exclude_none=True)),
                          indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _writable(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {_writable(k): _writable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_writable(v) for v in value]
    return value
