"""report.html from a job folder someone else wrote: every string that came from the
folder (job, agent, condition, policy, task names, errors, layers) is escaped, so a
hostile result.json cannot put markup or script into the page."""

from __future__ import annotations

from orchestrator.models.result import FailureMode, JobResult, TrialResult
from orchestrator.report.render import to_html
from orchestrator.report.tables import tables

EVIL = '<script>alert(1)</script>"\'&'


def test_every_string_from_the_job_folder_is_escaped_in_report_html():
    trial = TrialResult(trial_id="a" * 64, job=EVIL, task=f"ds/{EVIL}", task_path="/t", content_hash="h",
                        condition=EVIL, condition_hash="h", agent=EVIL, attempt=0,
                        failure_mode=FailureMode.VERIFIER_ERROR, error=EVIL, reward={"reward": 0.0},
                        layer=EVIL, scenario_class=EVIL, started_at=0.0, finished_at=1.0)
    job = JobResult(job=EVIL, condition=EVIL, condition_hash="h", agent=EVIL, policy=EVIL, k=1,
                    n_trials=1, void=[trial.trial_id])
    page = to_html(job, tables([trial]), trials=[trial])
    assert "<script>" not in page
    assert page.count("&lt;script&gt;") >= 6  # job, agent, condition, policy, task, error...
