"""JUnit XML for CI systems: one testcase per trial; a failure carries the failure mode and
the verifier's details."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from orchestrator.models.result import ERRORED, TrialResult, headline_of
from orchestrator.report.gate import Gate


def _details(job_dir: Path, trial: TrialResult) -> str:
    folder = next((job_dir / "trials").glob(f"*__{trial.trial_id[:12]}"), None)
    parts = []
    for name in ("details.json", "test-stdout.txt"):
        path = folder / "verifier" / name if folder else None
        if path is not None and path.is_file():
            parts.append(f"--- {name}\n{path.read_text(errors='replace')[-4000:]}")
    return "\n".join(parts)


def write_junit(job_name: str, job_dir: Path, trials: list[TrialResult], out: Path,
                gate: Gate | None = None) -> None:
    """One testcase per trial; with a gate, its rule as a suite property and one testcase
    per task it judged (a failure when the task gates)."""
    suite = ET.Element("testsuite", name=job_name, tests=str(len(trials)))
    regressed = {v.task: v for v in gate.verdicts if v.gates} if gate else {}
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
            if t.task in regressed:
                message = f"REGRESSION ({regressed[t.task].line()}): " + message
            if t.voided_reward is not None:
                message += f" (void: the verifier gave {headline_of(t.voided_reward):g})"
            node = ET.SubElement(case, "failure", type=t.failure_mode.value, message=message)
            node.text = "\n".join(filter(None, [t.error or "", f"reward: {t.reward}", _details(job_dir, t)]))
    if gate is not None:
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="orchestra.gate.rule", value=gate.rule)
        for v in gate.verdicts:
            case = ET.SubElement(suite, "testcase", classname="orchestra.gate", name=v.task, time="0")
            if v.gates:
                failures += 1
                ET.SubElement(case, "failure", type=v.verdict, message=f"{v.verdict}: {v.line()}")
            else:
                ET.SubElement(case, "system-out").text = f"{v.verdict}: {v.line()}"
        suite.set("tests", str(len(trials) + len(gate.verdicts)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("time", f"{total_time:.3f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(out, encoding="utf-8", xml_declaration=True)
