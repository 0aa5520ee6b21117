"""JUnit XML for CI systems: one testcase per trial; a failure carries the failure mode and
the verifier's details."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from orchestrator.models import ERRORED, TrialResult, headline_of
from orchestrator.paths import JobDir, TrialDir
from orchestrator.report.gate import Gate
from orchestrator.report.templating import shown

# what XML 1.0 cannot carry at all, escaped or not (a grader's ANSI colours, a NUL, a
# lone surrogate): a CI parser rejects the whole file over one of them
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(text: str) -> str:
    """`text` with every character XML 1.0 forbids written as a visible `\\xNN` escape, and
    bidi controls as [U+202E] (templating.shown: a CI page would show the name reversed)."""
    text = shown(text)
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def _sanitize(root: ET.Element) -> None:
    for node in root.iter():
        node.text = _xml_safe(node.text) if node.text else node.text
        node.tail = _xml_safe(node.tail) if node.tail else node.tail
        for key, value in node.attrib.items():
            node.attrib[key] = _xml_safe(value)


def _details(job_dir: Path, trial: TrialResult) -> str:
    folder = JobDir(job_dir).find_trial(trial.trial_id)
    parts = []
    if folder is None:
        return ""
    verifier = TrialDir(folder)
    for path in (verifier.verifier / "details.json", verifier.verifier_stdout):
        if path.is_file():
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")
    return "\n".join(parts)


def write_junit(job_name: str, job_dir: Path, trials: list[TrialResult], out: Path,
                gate: Gate | None = None) -> None:
    """One testcase per trial; with a gate, its rule, baseline and number of tasks compared
    as suite properties and one testcase per task it compared, whatever its verdict (a
    failure when the task gates, skipped when the baseline graded none of its attempts),
    with the verdict, how the task was matched and the counts as properties."""
    suite = ET.Element("testsuite", name=job_name, tests=str(len(trials)))
    regressed = {v.task: v for v in gate.verdicts if v.gates} if gate else {}
    failures = errors = skipped = 0
    total_time = 0.0
    for t in sorted(trials, key=lambda t: (t.task, t.attempt)):
        seconds = max(0.0, t.finished_at - t.started_at)
        total_time += seconds
        case = ET.SubElement(suite, "testcase", classname=t.task.split("/")[0],
                             name=f"{t.task.split('/')[-1]}#{t.attempt}", time=f"{seconds:.3f}")
        if t.model is not None:  # what the trial's model calls spent, counted or estimated
            facts = ET.SubElement(case, "properties")
            for key, value in (("tokens", str(t.tokens)), ("tokens_estimated", str(t.tokens_estimated).lower()),
                               ("cost_usd", f"{t.cost:.6f}" if t.cost_known else "unknown")):
                ET.SubElement(facts, "property", name=f"orchestra.{key}", value=value)
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
        ET.SubElement(properties, "property", name="orchestra.gate.baseline", value=gate.baseline_job)
        ET.SubElement(properties, "property", name="orchestra.gate.compared", value=str(gate.compared))
        for v in gate.verdicts:  # every compared task, the unchanged ones too: CI sees what was compared
            case = ET.SubElement(suite, "testcase", classname="orchestra.gate", name=v.task, time="0")
            facts = ET.SubElement(case, "properties")
            for key, value in (("verdict", v.verdict), ("gates", str(v.gates).lower()),
                               ("matched_by", v.matched_by), ("baseline_task", v.baseline_task),
                               ("test", v.test), ("baseline", str(v.baseline)), ("now", str(v.now)),
                               ("p_value", "" if v.p_value is None else f"{v.p_value:.6g}")):
                ET.SubElement(facts, "property", name=f"orchestra.gate.{key}", value=value)
            text = f"{v.verdict}: {v.line()} (matched by {v.matched_by})"
            if v.gates:
                failures += 1
                ET.SubElement(case, "failure", type=v.verdict, message=text)
            elif v.verdict == "unjudged":  # nothing graded in the baseline: compared with nothing
                skipped += 1
                ET.SubElement(case, "skipped", message=text)
            else:
                ET.SubElement(case, "system-out").text = text
        suite.set("tests", str(len(trials) + len(gate.verdicts)))
    suite.set("skipped", str(skipped))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("time", f"{total_time:.3f}")
    _sanitize(suite)  # names, messages and the grader's output alike
    out.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(out, encoding="utf-8", xml_declaration=True)
