"""JUnit XML for CI systems: one testcase per trial; a failure carries the failure mode and
the verifier's details."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from orchestrator.models.result import ERRORED, TrialResult


def _details(job_dir: Path, trial: TrialResult) -> str:
    folder = next((job_dir / "trials").glob(f"*__{trial.trial_id[:12]}"), None)
    parts = []
    for name in ("details.json", "test-stdout.txt"):
        path = folder / "verifier" / name if folder else None
        if path is not None and path.is_file():
            parts.append(f"--- {name}\n{path.read_text(errors='replace')[-4000:]}")
    return "\n".join(parts)


def write_junit(job_name: str, job_dir: Path, trials: list[TrialResult], out: Path,
                regressed: set[str] | None = None) -> None:
    suite = ET.Element("testsuite", name=job_name, tests=str(len(trials)))
    failures = errors = 0
    total_time = 0.0
    for t in sorted(trials, key=lambda t: (t.task, t.attempt)):
        seconds = max(0.0, t.finished_at - t.started_at)
        total_time += seconds
        case = ET.SubElement(suite, "testcase", classname=t.task.split("/")[0],
                             name=f"{t.task.split('/')[-1]}#{t.attempt}", time=f"{seconds:.3f}")
        if t.failure_mode in ERRORED:
            errors += 1
            node = ET.SubElement(case, "error", type=t.failure_mode.value, message=t.error or t.failure_mode.value)
            node.text = _details(job_dir, t)
        elif t.headline < 1.0 or t.failure_mode.value != "none":
            failures += 1
            message = f"reward {t.headline:g}; failure mode {t.failure_mode.value}"
            if t.task in (regressed or set()):
                message = "REGRESSION (passed in the baseline): " + message
            if t.voided_reward is not None:
                message += f" (void: the verifier gave {t.voided_reward.get('reward', 0):g})"
            node = ET.SubElement(case, "failure", type=t.failure_mode.value, message=message)
            node.text = "\n".join(filter(None, [t.error or "", f"reward: {t.reward}", _details(job_dir, t)]))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("time", f"{total_time:.3f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(out, encoding="utf-8", xml_declaration=True)
