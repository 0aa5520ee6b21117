"""Collect (DESIGN 2 step 7): copy the evidence out of the stopped sandbox, safely and
capped, and export the relay snapshot as relay-evidence.json."""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.archive import DEFAULT_CAP_FILES, safe_extract
from orchestrator.log import get_logger
from orchestrator.models import CollectedPath, RelayRecord, TrialResult
from orchestrator.paths import AGENT_LOGS, ARTIFACTS, LOGS, TrialDir
from orchestrator.runtime import Runtime
from orchestrator.scrub import scrub_json
from orchestrator.tasks import Task
from orchestrator.trial.hostcopy import host_tar
from orchestrator.trial.sandbox import Sandbox
from orchestrator.util import write_json_atomic

if TYPE_CHECKING:
    from orchestrator.services import TrialRelay

log = get_logger()
COLLECT_CAP_BYTES = 256 * 1024 * 1024  # everything one trial copies out
AGENT_LOG_CAP_BYTES = 32 * 1024 * 1024  # /logs/agent (stdout/stderr floods stop here)
AGENT_LOG_FILE_CAP_BYTES = 8 * 1024 * 1024  # ... and any one file in it
EVIDENCE_NAME = "relay-evidence.json"


def collect(runtime: Runtime, task: Task, box: Sandbox, paths: TrialDir) -> None:
    """Copy out /logs/agent, /logs/artifacts and the declared artifacts, safely, capped."""
    container = box.agent
    budget = COLLECT_CAP_BYTES
    wanted = [(AGENT_LOGS, paths.agent, "agent"), (ARTIFACTS, paths.artifacts, "artifacts")]
    caps = {AGENT_LOGS: AGENT_LOG_CAP_BYTES}
    for path in task.config.artifacts:
        parent = paths.files / Path(path).parent.relative_to("/")
        wanted.append((path, parent, ""))
    for source, dest, strip in wanted:
        cap = min(budget, caps.get(source, budget))
        file_cap = AGENT_LOG_FILE_CAP_BYTES if source == AGENT_LOGS else None
        stream, cut, unlisted = copy_out(runtime, box, container, source, max(cap, 0), file_cap)
        if stream is None:
            log.info("collect.missing", trial=box.trial_id[:12], path=source)
            continue
        try:
            report = safe_extract(stream, dest, cap_bytes=max(cap, 0), strip_prefix=strip,
                                  file_cap_bytes=file_cap)
        finally:
            stream.close()
        report.truncated = report.truncated or cut or unlisted > 0
        report.skipped += unlisted
        budget -= report.bytes
        box.collected[source] = CollectedPath(files=report.files, bytes=report.bytes,
                                              truncated=report.truncated, rejected=report.n_rejected,
                                              skipped=report.skipped)
        if report.rejected:
            log.warning("collect.rejected", trial=box.trial_id[:12], path=source,
                        rejected=report.rejected[:20], truncated=report.truncated)


def copy_out(runtime: Runtime, box: Sandbox, container: str, source: str, cap_bytes: int,
             file_cap_bytes: int | None = None) -> tuple[Generator[bytes, None, None] | None, bool, int]:
    """A tar stream of `source` in `container`, whether data was cut at the caps, and how many
    members past the member cap were left out of the stream (counted). A folder
    under /logs of a container on the trial's loop disk is read on the host (no engine
    round trip, never following the agent's links: hostcopy); anything else via the engine."""
    if box.loop_disk is not None and container in box.on_disk and (
            source.startswith(LOGS + "/") and source.count("/") == 2):
        made = host_tar(box.loop_disk.logs / Path(source).name, Path(source).name, cap_bytes,
                        file_cap_bytes, DEFAULT_CAP_FILES)
        return (made.chunks, made.cut, made.unlisted) if made is not None else (None, False, 0)
    return runtime.get_archive(container, source), False, 0


def export_evidence(relay: TrialRelay, paths: TrialDir, result: TrialResult) -> None:
    """The relay snapshot replaces whatever the agent left under that name."""
    started = time.monotonic()
    record = result.relay = result.relay or RelayRecord()  # made when the relay started
    snapshot = relay.evidence()
    evidence = snapshot.model_dump(mode="json")
    leaked = relay.leaked_by(json.dumps(evidence))
    if leaked:  # the agent posted a key: its doing, graded as usual, the key scrubbed
        evidence = scrub_json(evidence, relay.secrets())
        record.secret_leaked_by_agent = leaked
        log.warning("relay.secret_posted", trial=result.trial_id[:12], identities=leaked)
    paths.artifacts.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.artifacts / EVIDENCE_NAME, evidence)
    write_json_atomic(paths.root / "relay-engrams.json",
                      scrub_json(relay.store.engram_log(), relay.secrets()))
    record.export_sec = round(time.monotonic() - started, 4)
    record.message_count, record.task_event_id = snapshot.message_count, snapshot.task_event_id
