"""Every trial's trajectory in ATIF (DESIGN 3.6): `agent/trajectory.atif.json`, written at
collection for any agent, from what the trial folder holds:

1. the agent's own trajectory (agent/trajectory.jsonl, DESIGN 3.6 events: its own log, or
   an installed CLI's converted) where it has events: its steps, tool calls and results;
   each step it can be matched to a model call (by tool call id, else by the tool and its
   arguments, else by its text) gets
   that call's model, tokens, time and reasoning (a trajectory orchestra itself made from
   the model calls, for an agent without a log, is passed over for the calls: 2);
2. else the model proxy's exchanges (model/exchanges.jsonl, trial/atif_calls.py): one
   agent step per answered call, the tool results the agent sent back as its observations;
3. else the agent's command, when it ran one without a model (the oracle's solve.sh, a
   manifest's command): one deterministic step (`llm_call_count: 0`) with what it printed;
4. else (nop) the instruction alone, with a note that the agent did nothing.

Step 1 of every document is the instruction the agent was handed (agent/instruction.md),
as the user's. Each step of a multi-step task gets its own (steps/NAME/agent/), with the
model calls made since the step before. The document says which source it was built from (`extra.source`) and what
it could not place (`notes`). The agent wrote its trajectory, so nothing in it is trusted:
what does not fit is left out and counted, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orchestrator
from orchestrator.log import get_logger
from orchestrator.models import event_of, tool_of
from orchestrator.models.atif import (
    FILE_NAME,
    Agent,
    FinalMetrics,
    Metrics,
    Observation,
    ObservationResult,
    Step,
    ToolCall,
    Trajectory,
)
from orchestrator.models.trajectory import records
from orchestrator.paths import SOURCE_ROOT
from orchestrator.services import read_exchanges, trajectory_from_exchanges
from orchestrator.trial.atif_calls import ModelCall, Record, arguments, read_calls, text_of
from orchestrator.util import JsonObject, write_atomic

if TYPE_CHECKING:
    from orchestrator.models import TrialResult
    from orchestrator.tasks import Task
    from orchestrator.trial.context import TrialContext

log = get_logger()
MAX_TEXT = 256 * 1024  # one message or tool output in the document; beyond it, cut and said


@dataclass(frozen=True, kw_only=True)
class TrialFacts:
    """What the document says of the trial besides its files."""

    trial_id: str
    agent: str
    agent_version: str
    command: str | None = None  # the command the agent ran, for an agent without a model
    exit_code: int | None = None
    had_model: bool = False  # the trial had a model proxy (its calls may all have been refused)
    since: float | None = None  # a later step of a multi-step task: its calls started from then
    extra: dict[str, Any] = field(default_factory=dict)  # job, task, attempt


def agent_version(agent: object) -> str:
    """An installed CLI's pinned version, the agent stack's for the reference agent, else
    orchestra's (a built-in agent is part of it)."""
    recipe = getattr(agent, "recipe", None)
    if isinstance(getattr(recipe, "version", None), str):
        return str(recipe.version)  # type: ignore[union-attr]
    if getattr(agent, "name", None) == "reference":
        stack = SOURCE_ROOT / "images" / "agent-stack" / "VERSION"
        if stack.is_file():
            return stack.read_text().strip() or orchestrator.__version__
    return orchestrator.__version__


def write_trial_atif(ctx: TrialContext, task: Task, agent_dir: Path, exchanges: Path,
                     result: TrialResult) -> None:
    """At collection (trial/lifecycle.py): the trial's ATIF, next to its trajectory. Agent
    data that defeats the builder is logged, never the trial's error."""
    agent = ctx.agent
    facts = TrialFacts(trial_id=result.trial_id, agent=agent.name, agent_version=agent_version(agent),
                       command=agent.command(task), exit_code=result.agent_exit_code,
                       had_model=bool(ctx.manifest.orchestrator.endpoint), since=_earlier_steps_end(agent_dir),
                       extra={"job": result.job, "task": result.task, "attempt": result.attempt})
    try:
        write_atif(agent_dir, exchanges, facts)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        log.error("atif.failed", trial=result.trial_id[:12], error=f"{exc.__class__.__name__}: {exc}")


def _earlier_steps_end(agent_dir: Path) -> float | None:
    """For a step of a multi-step task (steps/NAME/agent), when the steps before it had
    their ATIF written: the trial's one record of model calls holds theirs too."""
    if agent_dir.parent.parent.name != "steps":
        return None
    times = [p.stat().st_mtime for p in agent_dir.parent.parent.glob(f"*/agent/{FILE_NAME}")
             if p.parent != agent_dir]
    return max(times) if times else None


def write_atif(agent_dir: Path, exchanges: Path, facts: TrialFacts) -> Trajectory:
    """Build the trial's ATIF and write it to agent_dir/trajectory.atif.json."""
    trajectory = build_atif(agent_dir, exchanges, facts)
    write_atomic(agent_dir / FILE_NAME, trajectory.to_json())
    log.info("atif.written", trial=facts.trial_id[:12], steps=len(trajectory.steps),
             source=(trajectory.extra or {}).get("source"))
    return trajectory


def build_atif(agent_dir: Path, exchanges: Path, facts: TrialFacts) -> Trajectory:
    record = read_calls(exchanges, facts.since)
    doc = _Document(record)
    instruction = _read(agent_dir / "instruction.md")
    if instruction is None:
        doc.add(source="system", message="the instruction the agent was handed was not collected")
    else:
        doc.add(source="user", message=_cap(instruction))
    lines = list(records(agent_dir / "trajectory.jsonl"))
    if any(r is not None and (event_of(r) or "memory_recall" in r) for _, r in lines) \
            and not _made_from(lines, exchanges):
        source = "agent trajectory"
        _from_events(doc, lines, instruction)
    elif record.calls:
        source = "model exchanges"
        _from_calls(doc, record.calls)
    elif facts.command is not None:
        source = "agent command"
        _from_command(doc, agent_dir, facts)
    else:
        source = "none"
        doc.notes.append("the agent ran nothing: no trajectory, no model calls, no command")
    return doc.finish(facts, source)


def _made_from(lines: list[tuple[int, JsonObject | None]], exchanges: Path) -> bool:
    """Whether the trajectory is the one orchestra made from the model calls for an agent
    without a log (agents/installed.py): then the calls themselves say more (reasoning,
    the model and tokens of each), and are the source."""
    if not exchanges.is_file() or exchanges.is_symlink():
        return False
    try:
        made = trajectory_from_exchanges(read_exchanges(exchanges))
    except (AttributeError, TypeError, KeyError, IndexError):  # a record it cannot read
        return False
    return [r for _, r in lines] == made


# ---- the document being built ----------------------------------------------------------
@dataclass
class _Draft:
    source: str
    message: str
    calls: list[ToolCall] = field(default_factory=list)
    results: list[ObservationResult] = field(default_factory=list)
    model_call: ModelCall | None = None
    llm_call_count: int | None = None
    extra: dict[str, Any] | None = None


class _Document:
    """Steps in the making, and the model calls they may be matched to."""

    def __init__(self, record: Record):
        self.record = record
        self.steps: list[_Draft] = []
        self.notes: list[str] = []
        self.used: set[int] = set()  # model calls matched to a step
        self.by_call_id = {c.id: m for m in record.calls for c in m.calls if c.id}

    def add(self, **fields: Any) -> _Draft:
        draft = _Draft(**fields)
        self.steps.append(draft)
        return draft

    def owner(self, call_id: str) -> _Draft | None:
        """The latest step that made tool call `call_id`."""
        return next((s for s in reversed(self.steps) if any(c.tool_call_id == call_id for c in s.calls)),
                    None)

    def match(self, draft: _Draft, model_call: ModelCall | None) -> None:
        if model_call is not None and model_call.index not in self.used:
            draft.model_call, draft.llm_call_count = model_call, 1
            self.used.add(model_call.index)

    def by_signature(self, name: str, args: JsonObject, current: _Draft | None) -> ModelCall | None:
        """The model call that asked for this tool with these arguments, where the agent's
        log names its calls its own way (Gemini's have no id; some CLIs make their own):
        the open step's call, else the first not yet matched."""
        def asked(m: ModelCall) -> int:
            return sum(c.name == name and c.arguments == args for c in m.calls)
        if current is not None and current.model_call is not None and asked(current.model_call) > sum(
                c.function_name == name and c.arguments == args for c in current.calls):
            return current.model_call
        return next((m for m in self.record.calls if m.index not in self.used and asked(m)), None)

    def match_text(self, draft: _Draft, text: str) -> None:
        wanted = text.strip()
        self.match(draft, next((m for m in self.record.calls if m.index not in self.used
                                and m.text.strip() == wanted and wanted), None))

    def finish(self, facts: TrialFacts, source: str) -> Trajectory:
        calls = self.record.calls
        models = [m.model for m in calls if m.model]
        default_model = max(models, key=models.count) if models else None  # ties: the first
        steps = [_step(i, d, default_model) for i, d in enumerate(self.steps, start=1)]
        unmatched = len(calls) - len(self.used)
        if source == "agent trajectory" and unmatched:
            self.notes.append(f"{unmatched} of {len(calls)} model calls matched no step of the agent's "
                              "trajectory (their tokens are in final_metrics)")
        if self.record.unanswered:
            self.notes.append(f"{self.record.unanswered} model calls had no answer to read (an error, "
                              "a streamed or cut record)")
        return Trajectory(
            session_id=facts.trial_id,
            agent=Agent(name=facts.agent, version=facts.agent_version, model_name=default_model,
                        tool_definitions=self.record.tools),
            steps=steps, notes="; ".join(self.notes) or None,
            final_metrics=FinalMetrics(
                total_prompt_tokens=_total(m.prompt_tokens for m in calls),
                total_completion_tokens=_total(m.completion_tokens for m in calls),
                total_cached_tokens=_total(m.cached_tokens for m in calls),
                total_steps=len(steps),
                extra={"model_calls": len(calls), "model_calls_unanswered": self.record.unanswered}),
            extra={"source": source, "producer": f"orchestra {orchestrator.__version__}", **facts.extra})


def _step(step_id: int, draft: _Draft, default_model: str | None) -> Step:
    call = draft.model_call
    agent = draft.source == "agent"
    return Step(
        step_id=step_id, source=draft.source,  # type: ignore[arg-type]
        timestamp=_iso(call.started) if call and call.started else None,
        model_name=call.model if agent and call and call.model != default_model else None,
        message=draft.message,
        reasoning_content=_cap(call.reasoning) if agent and call and call.reasoning else None,
        tool_calls=draft.calls or None,
        observation=Observation(results=draft.results) if draft.results else None,
        metrics=Metrics(prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens,
                        cached_tokens=call.cached_tokens) if agent and call else None,
        llm_call_count=draft.llm_call_count if agent else None, extra=draft.extra)


# ---- 1. from the agent's trajectory -----------------------------------------------------
def _from_events(doc: _Document, lines: list[tuple[int, JsonObject | None]], instruction: str | None) -> None:
    """DESIGN 3.6 events as steps: a message opens an agent step; tool dispatches join the
    open step while they belong to the same model call (or, unmatched, until a result came
    back); a result is the observation of the step that made its call; text events and
    memory recall are system steps."""
    skipped, unnamed = 0, 0
    current: _Draft | None = None
    first_message = True
    for _, record in lines:
        if record is None:
            skipped += 1
            continue
        if isinstance(record.get("memory_recall"), dict):
            recall = record["memory_recall"]
            hits = recall.get("hits") if isinstance(recall.get("hits"), list) else []
            current = None
            doc.add(source="system", message=f"memory recall: {len(hits)} hits",
                    extra={"memory_recall": recall})
            continue
        event = event_of(record)
        kind, text = event.get("kind"), text_of(event.get("text"))
        tool = tool_of(event) or {}
        if kind == "message":
            if first_message and instruction is not None and text.strip() == instruction.strip():
                first_message = False  # the agent's note of the instruction: step 1 already
                continue
            first_message = False
            current = doc.add(source="agent", message=_cap(text))
            doc.match_text(current, text)
        elif kind == "tool_dispatch":
            call_id = _str(tool.get("id"))
            if call_id is None:
                unnamed += 1
                call_id = f"call-{unnamed}"
            name, args = _str(tool.get("name")) or "", arguments(tool.get("args"))
            owner = doc.by_call_id.get(call_id) or doc.by_signature(name, args, current)
            if current is None or current.source != "agent" or not _joins(current, owner):
                current = doc.add(source="agent", message="")
            if current.model_call is None:
                doc.match(current, owner)
            current.calls.append(ToolCall(tool_call_id=call_id, function_name=name, arguments=args))
        elif kind == "tool_result":
            call_id = _str(tool.get("id"))
            output = tool.get("output")
            content = text_of(output) if output is not None else text
            extra = {k: tool[k] for k in ("err", "exit_code") if tool.get(k) not in (None, "")}
            _observe(doc, current, call_id, content, extra or None)
        elif text:
            current = None
            doc.add(source="system", message=_cap(text), extra={"kind": str(kind)})
        else:
            skipped += 1
    if skipped:
        doc.notes.append(f"{skipped} lines of the agent's trajectory were not events and were left out")


def _joins(current: _Draft, owner: ModelCall | None) -> bool:
    """Whether a tool dispatch belongs to the open agent step."""
    if owner is not None and current.model_call is not None:
        return owner is current.model_call
    return not current.results  # unmatched: a call after a result is the next turn's


def _observe(doc: _Document, current: _Draft | None, call_id: str | None, content: str,
             extra: JsonObject | None) -> None:
    """A tool result: the observation of the step that made the call; without one, of the
    open agent step (no call named), else a system step's."""
    owner = doc.owner(call_id) if call_id else None
    result = ObservationResult(source_call_id=call_id if owner else None, content=_cap(content), extra=extra)
    target = owner or (current if current is not None and current.source == "agent" else None)
    if target is None:
        target = doc.add(source="system", message="a tool result with no tool call")
    target.results.append(result)


# ---- 2. from the model proxy's exchanges -----------------------------------------------
def _from_calls(doc: _Document, calls: list[ModelCall]) -> None:
    """One agent step per answered call; the results a request sends back are observations
    of the steps that made those calls (each once: agents re-send the whole history)."""
    seen: set[str] = set()
    draft: _Draft | None = None
    for call in calls:
        for call_id, output in call.results:
            owner = doc.owner(call_id)
            if owner is not None and call_id not in seen:
                seen.add(call_id)
                owner.results.append(ObservationResult(source_call_id=call_id, content=_cap(output)))
        if draft is not None:
            _by_name(draft, call.results)
        draft = doc.add(source="agent", message=_cap(call.text))
        doc.match(draft, call)
        for number, tool in enumerate(call.calls, start=1):
            call_id = tool.id or f"call-{call.index + 1}-{number}"
            draft.calls.append(ToolCall(tool_call_id=call_id, function_name=tool.name,
                                        arguments=tool.arguments))
    doc.notes.append("built from the model calls the proxy recorded: what the agent did after its "
                     "last call (the results of its last tool calls) is not seen")


def _by_name(step: _Draft, results: list[tuple[str, str]]) -> None:
    """Calls the API gave no id (Gemini's functionCall without one) are answered by name:
    the last results of that name in the next request (it re-sends the history first)."""
    answered = {r.source_call_id for r in step.results}
    pending = [c for c in step.calls if c.tool_call_id.startswith("call-") and c.tool_call_id not in answered]
    outputs = list(results)
    for tool in reversed(pending):
        index = next((i for i in range(len(outputs) - 1, -1, -1) if outputs[i][0] == tool.function_name), None)
        if index is not None:
            step.results.append(ObservationResult(source_call_id=tool.tool_call_id,
                                                  content=_cap(outputs.pop(index)[1])))


# ---- 3. from the agent's command --------------------------------------------------------
def _from_command(doc: _Document, agent_dir: Path, facts: TrialFacts) -> None:
    """The command as one step, its output the observation: a deterministic dispatch
    (`llm_call_count` 0) where the trial had no model; with one whose calls all went
    unanswered or unrecorded (a budget refusal), how many LLM calls it holds is not known."""
    printed = _read(agent_dir / "stdout.txt") or ""
    errors = _read(agent_dir / "stderr.txt") or ""
    extra: dict[str, Any] = {"exit_code": facts.exit_code}
    if errors:
        extra["stderr"] = _cap(errors)
    draft = doc.add(source="agent", message="", llm_call_count=None if facts.had_model else 0)
    if facts.had_model:
        doc.notes.append("the agent had a model endpoint and no model call of it was answered "
                         "(refused calls are not recorded): its command and output only")
    draft.calls.append(ToolCall(tool_call_id="command", function_name="shell",
                                arguments={"command": facts.command}))
    draft.results.append(ObservationResult(source_call_id="command", content=_cap(printed), extra=extra))


# ---- small readers -----------------------------------------------------------------------
def _read(path: Path) -> str | None:
    if not path.is_file() or path.is_symlink():
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read(MAX_TEXT + 1)


def _cap(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n[orchestra: cut at {MAX_TEXT} characters]"


def _str(value: object) -> str | None:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)
    return None


def _iso(epoch: float) -> str | None:
    try:
        return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")
    except (ValueError, OverflowError, OSError):
        return None


def _total(values: Any) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
