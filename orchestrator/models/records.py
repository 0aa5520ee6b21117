"""What a trial's phases and host services record in its result.json, one model each, and
the job's memory shadow (DESIGN 1: nothing crosses a boundary as a bare dict).

Field names are the JSON keys the producers wrote before these models existed, so every
result.json written since still loads. Unknown keys are ignored (pydantic's default): a
key an older orchestra wrote and this one no longer knows costs nothing on reading.

- ModelUsage: the model proxy's counts (services/proxy.py `ModelProxy.summary`)
- MemoryAudit: the seed and the trajectory audit (trial/agent.py, trial/audit.py)
- EngramSeeded: one engram `mem set` at seed time (tasks/memory.py `seed_engrams`)
- RelayRecord: the relay's start, export and bounds (trial/lifecycle.py, trial/collect.py)
- CollectedPath: one copied-out path (trial/collect.py)
- EgressRecord: the allowlist proxy's counts (services/egress.py)
- WorkerRecord: one roster worker (trial/workers.py `stop_workers`)
- StandInRecord: a base that stood in for a FROM reference (tasks/standins.py `StandIn`)
- MemoryShadow: what memory did across a job's trials (job/shadow.py `memory_shadow`), and
  ArmShadow, one arm's in compare.json
- Recorded[...]: a record only some trials make, None when not made (written `{}`)
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    SerializerFunctionWrapHandler,
    WrapSerializer,
    computed_field,
)


class ProxyCounts(BaseModel):
    """What the per-trial model proxy counts as calls go through it (services/apis/calls.py
    and ledger.py add to one while the trial runs): calls, refusals, retries, tokens, cost.

    Tokens: `prompt_tokens` / `completion_tokens` are all the trial's, each call's either as
    the upstream counted it (`counted_*`, `usage_counted_calls`) or, where the upstream sent
    no usage, estimated at ~4 bytes a token (`estimated_*`, `usage_estimated_calls`): the
    two are never mixed up. `budget_charged_*` is what the budget was charged: counted usage,
    or for an estimated call its upper bound (a token a byte), so a ceiling holds either way.
    Cost: dollars from counted usage and the model's prices only; `cost_unknown_calls` calls
    added none (no usage, or no price), and a report says the cost is unknown then."""

    calls: int = 0
    refused_budget: int = 0
    upstream_errors: int = 0  # the upstream failed the call after every retry: an endpoint_error trial
    upstream_refusals: int = 0  # a 4xx (e.g. context overflow): the agent's request failed
    stream_errors: int = 0  # of upstream_errors: an error event or a break after the stream began
    rate_limited: int = 0  # of upstream_errors: 429 past the retries (the agent got its API's 429)
    abandoned: int = 0  # the agent gave up waiting; the proxy did not re-send
    last_abandoned: bool = False  # no call was answered after the last one abandoned
    retries: int = 0
    last_error: str | None = None  # the upstream's last error: status and body, cut, scrubbed
    prompt_tokens: int = 0
    completion_tokens: int = 0
    counted_prompt_tokens: int = 0
    counted_completion_tokens: int = 0
    estimated_prompt_tokens: int = 0
    estimated_completion_tokens: int = 0
    usage_counted_calls: int = 0
    usage_estimated_calls: int = 0
    budget_charged_tokens: int = 0
    budget_charged_cost: float = 0.0
    cost: float = 0.0
    cost_unknown_calls: int = 0
    output_field: str | None = None  # the chat output cap's field, when learned from a 400
    by_api: dict[str, int] = {}  # calls per agent API

    @property
    def tokens_estimated(self) -> bool:
        return self.usage_estimated_calls > 0

    @property
    def cost_known(self) -> bool:
        return self.cost_unknown_calls == 0


class ModelUsage(ProxyCounts):
    """The per-trial model proxy's record in the result: its counts, then its server's own
    refusals and waits, then its exchanges record's."""
    connections_refused: int = 0  # past the proxy's connection cap
    body_rate_refused: int = 0
    body_rate_waited_sec: float = 0.0
    request_rate_refused: int = 0
    request_rate_waited_sec: float = 0.0
    # the exchanges record (present when the proxy recorded: written, and dropped at its cap)
    exchanges_written: int | None = None
    exchanges_dropped: int | None = None
    exchanges_dropped_bytes: int | None = None


class EngramSeeded(BaseModel):
    """One engram seeded with `mem set` before the agent started (memory-on)."""

    slug: str
    exit_code: int | None
    seconds: float
    via: str = "mem set <slug> -"


class MemoryAudit(BaseModel):
    """The memory side of a trial: what was seeded, and the trajectory audit's findings
    (recall statistics, markers used at point of use, answer leaks). Present on every
    result; a trial that never reached the audit keeps the defaults (complete, no recall)."""

    state_home: str | None = None  # the agent's fresh state root (ORCHESTRA_STATE_HOME)
    fact_files_seeded: int = 0  # memory-on: fact files put in their places
    engram_seeds: list[EngramSeeded] = []
    complete: bool = True  # False: the audit could not see everything (incomplete_reason)
    incomplete_reason: str | None = None
    malformed_lines: list[int] = []
    recall_events: int = 0
    hits: int = 0
    injected_chars: int = 0
    suppressed: int = 0
    markers: int = 0  # point-of-use markers the task declares
    shadow_events: int = 0  # recalls carrying the V2 shadow retriever's top-1
    shadow_agree: int = 0
    markers_used: list[str] = []
    markers_before_recall: list[str] = []
    leaks: list[str] = []  # reads of grading material: any voids the trial (answer_leak)


class RelayRecord(BaseModel):
    """A relay trial's relay: how long it took to start and export, what the agent posted,
    and the bounds it met (rejected requests, limits, refused connections)."""

    start_sec: float | None = None
    export_sec: float | None = None
    message_count: int | None = None  # in relay-evidence.json
    task_event_id: str | None = None  # the instruction's event on the channel
    secret_leaked_by_agent: list[str] = []  # identities whose key the agent posted (scrubbed)
    rejected: int = 0
    rejections: list[str] = []  # the first reasons, capped
    limit_hits: dict[str, int] = {}  # "status: reason" -> times
    connections_refused: int = 0
    messages: int = 0
    engram_events: int = 0
    stored_bytes: int = 0


class CollectedPath(BaseModel):
    """One path copied out of the sandbox (/logs/agent, /logs/artifacts, a declared artifact)."""

    files: int = 0
    bytes: int = 0
    truncated: bool = False  # cut at a cap: what was copied is not all there was
    rejected: int = 0  # members refused by safe_extract (links out, odd names, ...)
    skipped: int = 0  # members past the member cap, counted, not copied


class EgressRecord(BaseModel):
    """Under an allowlist: the hosts allowed, and the hosts asked for, through or refused."""

    allowed_hosts: list[str] = []
    allowed: dict[str, int] = {}  # host -> requests let through
    refused: dict[str, int] = {}  # host -> requests refused


class WorkerRecord(BaseModel):
    """One roster worker: the member it ran, its exit code and time, its model counts."""

    member: str
    name: str
    exit_code: int | None = None
    seconds: float = 0.0
    disk_limit: bool = False  # the watchdog killed it for its writable layer
    model: ModelUsage | None = None  # when the member had an endpoint


class StandInRecord(BaseModel):
    """A FROM reference the engine did not have, and the offline base built on instead."""

    reference: str
    stand_in: str  # orchestra/base:<release>
    release: str
    python: str
    reason: str
    warning: str | None = None  # a digest pin the stand-in does not honour


class MemoryShadow(BaseModel):
    """What memory did in a job, summed over its trials' audits (job/shadow.py says how)."""

    trials: int = 0
    recall_events: int = 0
    hits: int = 0
    injected_chars: int = 0
    suppressed: int = 0
    marker_trials: int = 0  # x: a marker used at point of use after a recall
    marker_eligible: int = 0  # N: trials whose task declares markers
    shadow_events: int = 0
    shadow_agree: int = 0

    @property
    def marker_rate(self) -> str:
        return f"{self.marker_trials}/{self.marker_eligible}"

    @property
    def agreement(self) -> float | None:
        return round(self.shadow_agree / self.shadow_events, 4) if self.shadow_events else None

    def rows(self) -> list[list[str]]:
        """(metric, value) rows for every report format."""
        agreement = ("-" if self.agreement is None else
                     f"{100 * self.agreement:.0f}% ({self.shadow_agree}/{self.shadow_events})")
        return [["recall events", str(self.recall_events)], ["hits", str(self.hits)],
                ["injected chars", str(self.injected_chars)], ["suppressed", str(self.suppressed)],
                ["point-of-use markers (x/N)", self.marker_rate],
                ["top-1 agreement, primary vs V2 shadow", agreement]]

    def line(self) -> str:
        return "memory shadow: " + ", ".join(f"{name} {value}" for name, value in self.rows())


class ArmShadow(MemoryShadow):
    """One arm's shadow in compare.json: its fields plus the two derived figures, written
    out so a reader of the file need not recompute them (read back, they are ignored)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def marker_rate(self) -> str:
        return f"{self.marker_trials}/{self.marker_eligible}"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def agreement(self) -> float | None:
        return round(self.shadow_agree / self.shadow_events, 4) if self.shadow_events else None


def _empty_as_none(value: Any) -> Any:
    """A record that was never made was written as `{}`: read it back as None."""
    return None if value == {} else value


def _none_as_empty(value: BaseModel | None, handler: SerializerFunctionWrapHandler) -> Any:
    """... and None is written as `{}` again, so result.json keeps its shape."""
    return {} if value is None else handler(value)


_R = TypeVar("_R", bound=BaseModel)
# A record only some trials make (a model proxy, a relay): None when not made, written as
# `{}` as it always was, and `{}` read back as None (so `if result.model` means "had one").
Recorded = Annotated[_R | None, BeforeValidator(_empty_as_none), WrapSerializer(_none_as_empty)]
