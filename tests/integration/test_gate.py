"""The regression gate for release pipelines, on jobs made by real runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import make_task

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


def orchestra(*args):
    return subprocess.run([ORCHESTRA, *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=600)


def test_fail_on_regression_exits_1_when_a_regression_task_went_from_pass_to_fail(tmp_path):
    layer = '[metadata]\nevaluation_layer = "regression"\n'
    make_task(tmp_path / "ds", "contract", toml=layer, solve="touch /app/ok\n")
    make_task(tmp_path / "ds", "capability", toml='[metadata]\nevaluation_layer = "workflow"\n',
              solve="touch /app/ok\n")
    jobs = tmp_path / "jobs"
    for name, agent in (("base", "oracle"), ("broken", "nop"), ("same", "oracle")):
        assert orchestra("run", "--path", str(tmp_path / "ds"), "--agent", agent, "-k", "1",
                         "--jobs-dir", str(jobs), "--job-name", name, "-q").returncode == 0
    # the same gate straight from `orchestra run`, for a pipeline's one command
    gated = orchestra("run", "--path", str(tmp_path / "ds"), "--agent", "nop", "--jobs-dir", str(jobs),
                      "--job-name", "gated", "-q", "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert gated.returncode == 1 and "regressed (regression layer): ds/contract" in gated.stdout
    assert (jobs / "gated/regressions.json").is_file() and (jobs / "gated/result.json").is_file()
    passing = orchestra("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "--jobs-dir", str(jobs),
                        "--job-name", "passing", "-q", "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert passing.returncode == 0 and "no regressions" in passing.stdout
    missing = orchestra("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "--jobs-dir", str(jobs),
                        "--job-name", "never", "-q", "--baseline", str(jobs / "nothing-here"))
    assert missing.returncode == 2 and not (jobs / "never").exists()  # refused before any trial
    broken = orchestra("report", str(jobs / "broken"), "--baseline", str(jobs / "base"),
                       "--fail-on-regression", "--junit", str(tmp_path / "junit.xml"))
    assert broken.returncode == 1, broken.stderr
    assert "regressed (regression layer): ds/contract" in broken.stdout
    assert "regressed (workflow layer): ds/capability" in broken.stdout
    assert "REGRESSION (passed in the baseline)" in (tmp_path / "junit.xml").read_text()
    same = orchestra("report", str(jobs / "same"), "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert same.returncode == 0 and "no regressions" in same.stdout
    improved = orchestra("report", str(jobs / "same"), "--baseline", str(jobs / "broken"))
    assert improved.returncode == 0 and "improved (regression layer): ds/contract" in improved.stdout
    # a task whose content changed between the jobs is refused unless asked for
    (tmp_path / "ds/contract/tests/extra.txt").write_text("changed\n")
    assert orchestra("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "--jobs-dir", str(jobs),
                     "--job-name", "changed", "-q").returncode == 0
    refused = orchestra("report", str(jobs / "changed"), "--baseline", str(jobs / "base"))
    assert refused.returncode == 2 and "content hash differs" in refused.stderr
    assert orchestra("report", str(jobs / "changed"), "--baseline", str(jobs / "base"),
                     "--allow-changed").returncode == 0
