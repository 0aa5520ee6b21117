"""The viewer's trial page (view/templates/trial.html.j2): why it failed first, then the
instruction, the trajectory (the memory markers it used highlighted), relay evidence as
threads, the tails of its outputs, reward, phases, limits, memory audit and its files.

Every value here is agent data read from the trial folder (pages.py's rules hold): it is
handed to the template as text, which escapes it; a highlighted marker is a segment of
text the template wraps in a span, so nothing is marked safe. Files are read in bounded
pieces: the instruction's head, the outputs' tails, the first 500 trajectory records.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from orchestrator.models import (
    ERRORED,
    VOID,
    RelayEvidence,
    RelayMessage,
    TrialResult,
    headline_of,
    trajectory,
)
from orchestrator.paths import JobDir, TrialDir
from orchestrator.util import JsonObject
from orchestrator.view.pages import FILE_PAGE_BYTES, href, view_page

_IN_A_TRIAL = TrialDir(Path())  # relative to a trial's folder
OUTPUTS = (("Agent stdout", _IN_A_TRIAL.agent_stdout), ("Agent stderr", _IN_A_TRIAL.agent_stderr),
           ("Verifier output", _IN_A_TRIAL.verifier_stdout))
Segments = list[tuple[str, bool]]  # (text, whether it is a memory marker)


def trial_page(job: str, folder: Path) -> str:
    result = TrialResult.model_validate_json(TrialDir(folder).result.read_text())

    def file_url(relative: Path | str) -> str:  # the file route resolves from the job folder
        return href("file", job, *JobDir(Path()).trial(folder.name).root.parts, *Path(relative).parts)

    outputs = [(label, _tail(folder / rel), file_url(rel))
               for label, rel in OUTPUTS if (folder / rel).is_file()]
    evidence = folder / "artifacts/relay-evidence.json"
    markers = result.memory.markers_used
    files = [(file_url(p.relative_to(folder)), str(p.relative_to(folder)))
             for p in sorted(folder.rglob("*"))[:500] if p.is_file()]
    return view_page(
        "trial.html.j2", f"{result.task} #{result.attempt}", result=result,
        why=_why(result, folder), instruction=_head(folder / "agent/instruction.md"),
        trajectory=_trajectory(folder / "agent/trajectory.jsonl", markers),
        evidence=_evidence(evidence) if evidence.is_file() else None, outputs=outputs,
        reward=json.dumps(result.reward, indent=1),
        timeline=" · ".join(f"{k} {v:.2f}s" for k, v in result.timings.model_dump().items()),
        limits=result.limits.model_dump_json(indent=1),
        memory=result.memory.model_dump_json(indent=1)[:20000],
        model=result.model.model_dump_json(indent=1) if result.model else "", files=files)


def _why(result: TrialResult, folder: Path) -> dict[str, Any]:
    """Passed, or how it failed: its kind, reward (the voided one for a void trial) and the
    verifier output's tail."""
    if result.failure_mode.value == "none" and headline_of(result.reward or {}) >= 1:
        return {"passed": True}
    kind = "void" if result.failure_mode in VOID else ("error" if result.failure_mode in ERRORED
                                                       else "failed")
    tail = TrialDir(folder).verifier_stdout
    return {"passed": False, "kind": kind,
            "reward": result.reward if result.reward is not None else result.voided_reward,
            "verifier": _tail(tail, 4000) if tail.is_file() else None}


def _head(path: Path, limit: int = FILE_PAGE_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, limit: int = 8000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return ("... " if size > limit else "") + handle.read().decode(errors="replace")
    except OSError:
        return ""


# ---- the trajectory --------------------------------------------------------------------------
def _marked(text: str, markers: re.Pattern[str] | None) -> Segments:
    """The text cut where a memory marker occurs, the markers' pieces flagged."""
    if markers is None:
        return [(text, False)]
    out, at = [], 0
    for match in markers.finditer(text):
        out += [(text[at:match.start()], False), (match.group(), True)]
        at = match.end()
    return [piece for piece in out + [(text[at:], False)] if piece[0]]


def _trajectory(path: Path, markers: object, limit: int = 500) -> list[dict[str, Any]] | None:
    """One dict a record (`turn`: its kind), the first `limit`; None with no trajectory."""
    if not path.is_file():
        return None
    words = sorted({"" if m is None else str(m) for m in markers} - {""} if isinstance(markers, list)
                   else [], key=len, reverse=True)  # the longest first where one holds another
    pattern = re.compile("|".join(map(re.escape, words))) if words else None
    turns: list[dict[str, Any]] = []
    for number, record in trajectory.records(path):
        if len(turns) >= limit:
            turns.append({"turn": "more", "limit": limit})
            break
        turns.append({"turn": "malformed", "line": number} if record is None else _turn(record, pattern))
    return turns


def _turn(record: JsonObject, markers: re.Pattern[str] | None) -> dict[str, Any]:
    """A memory recall, a tool call or result, or any other event (its kind and text)."""
    recall = record.get("memory_recall")
    if isinstance(recall, dict):
        hits = ", ".join(str(h.get("id")) for h in recall.get("hits") or [] if isinstance(h, dict))
        shadow = recall.get("shadow") if isinstance(recall.get("shadow"), dict) else None
        return {"turn": "recall", "hits": hits or "none", "used_chars": recall.get("used_chars"),
                "suppressed": recall.get("suppressed"), "top1": recall.get("top1"),
                "shadowed": bool(shadow), "shadow": (shadow or {}).get("top1"),
                "agree": bool(shadow) and recall.get("top1") == (shadow or {}).get("top1")}
    event = trajectory.event_of(record)
    tool = trajectory.tool_of(event)
    if tool is None:
        return {"turn": "text", "kind": event.get("kind"),
                "text": _marked(str(event.get("text") or ""), markers)}
    args = tool.get("args")
    args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"turn": "tool", "kind": event.get("kind"), "name": tool.get("name"),
            "args": _marked(args, markers), "result": event.get("kind") == "tool_result",
            "output": _marked(str(tool.get("output") or "")[:4000], markers),
            "exit_code": tool.get("exit_code"), "err": tool.get("err") or ""}


# ---- relay evidence --------------------------------------------------------------------------
def _evidence(path: Path) -> dict[str, Any]:
    """The relay's messages, each with its thread depth; `readable` False when it is not."""
    try:
        data = RelayEvidence.model_validate_json(path.read_text(errors="replace"))
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return {"readable": False, "messages": []}
    messages = data.messages
    by_id = {m.id: m for m in messages}
    names = {v.pubkey: k for k, v in data.identities.items()}

    def depth(message: RelayMessage) -> int:
        d, seen = 0, set()
        while message.reply_to_event_id in by_id and d < 8 and message.id not in seen:
            seen.add(message.id)
            message = by_id[message.reply_to_event_id]
            d += 1
        return d

    return {"readable": True, "messages": [
        {"depth": depth(m), "author": m.author, "role": m.author_role, "reply": bool(m.reply_to_event_id),
         "content": m.content, "mentions": ", ".join(names.get(p, p[:8]) for p in m.mentioned_pubkeys)}
        for m in messages[:1000]]}
