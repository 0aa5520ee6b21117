"""A job's trajectories in ATIF, in one folder (`orchestra report JOB --atif DIR`): each
trial's agent/trajectory.atif.json (each step's, for a multi-step task) copied out as
`<trial folder>.json` (`<trial folder>.<step>.json`). A trial without one (a job from before
orchestra wrote them), or whose file does not read as ATIF, gets it built now from its
folder (trial/atif.py), the same way collection does; then the command an agent ran
without a model is not known, only that it ran (its exit code), and a later step of a
multi-step task holds the model calls of the steps before it too."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

import orchestrator
from orchestrator.models import TrialResult
from orchestrator.models.atif import FILE_NAME, Trajectory
from orchestrator.paths import JobDir, TrialDir
from orchestrator.services import RECORD
from orchestrator.trial import TrialFacts, build_atif
from orchestrator.util import write_atomic

UNKNOWN_COMMAND = "(the agent's command: not recorded in the trial folder)"


@dataclass
class AtifExport:
    """What an export wrote: files copied as collected, files built now (and why)."""

    folder: Path
    copied: list[str] = field(default_factory=list)
    built: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # trials without a readable result.json

    @property
    def written(self) -> int:
        return len(self.copied) + len(self.built)


def export_atif(job_dir: Path, out: Path) -> AtifExport:
    """Every trial's ATIF of `job_dir` into `out` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    export = AtifExport(out)
    for trial in JobDir(job_dir).trial_folders():
        try:
            result = TrialResult.model_validate_json(TrialDir(trial).result.read_text())
        except (OSError, ValueError) as exc:
            export.problems.append(f"{trial.name}: no readable result.json ({str(exc).splitlines()[0]})")
            continue
        steps = sorted(p for p in (trial / "steps").glob("*") if p.is_dir()) if result.steps else []
        for folder, name in [(s, f"{trial.name}.{s.name}") for s in steps] or [(trial, trial.name)]:
            _one(folder / "agent", trial / RECORD, result, out / f"{name}.json", export)
    return export


def _one(agent_dir: Path, exchanges: Path, result: TrialResult, target: Path, export: AtifExport) -> None:
    written = agent_dir / FILE_NAME
    if written.is_file() and not written.is_symlink():
        try:
            Trajectory.model_validate_json(written.read_text(errors="replace"))
            write_atomic(target, written.read_bytes())
            export.copied.append(target.name)
            return
        except ValidationError as exc:
            why = f"its {FILE_NAME} did not read as ATIF ({exc.error_count()} problems)"
    else:
        why = f"no {FILE_NAME} (written at collection since orchestra wrote them)"
    facts = TrialFacts(trial_id=result.trial_id, agent=result.agent, agent_version=orchestrator.__version__,
                       command=UNKNOWN_COMMAND if result.agent_exit_code is not None else None,
                       exit_code=result.agent_exit_code, had_model=result.model is not None,
                       extra={"job": result.job, "task": result.task, "attempt": result.attempt})
    write_atomic(target, build_atif(agent_dir, exchanges, facts).to_json())
    export.built.append(f"{target.name}: {why}")
