"""Exit codes a pipeline can trust: orchestra crashing (an exception nothing caught) is exit
70 with a short message and the traceback in a file it names, never 1 (a gate that failed)."""

from __future__ import annotations

import re
import tempfile

import pytest

from orchestrator.cli import commands
from orchestrator.cli.app import EXIT_CODES


def test_an_uncaught_exception_exits_70_with_the_traceback_in_a_named_file(tmp_path, monkeypatch, capsys):
    def crashing_app():
        raise ZeroDivisionError("a bug deep inside")

    monkeypatch.setattr(commands, "app", crashing_app)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["orchestra", "report", "jobs/x"])
    with pytest.raises(SystemExit) as exited:
        commands.main()
    assert exited.value.code == 70
    stderr = capsys.readouterr().err
    assert "orchestra failed (a bug in orchestra" in stderr and "ZeroDivisionError: a bug deep inside" in stderr
    found = re.search(r"the traceback is in (\S+); exit 70", stderr)
    assert found, stderr
    trace = open(found.group(1)).read()
    assert found.group(1).startswith(str(tmp_path))
    assert trace.startswith("orchestra report jobs/x\n") and "Traceback (most recent call last)" in trace
    assert "in crashing_app" in trace and "ZeroDivisionError: a bug deep inside" in trace
    assert "Traceback" not in stderr  # the message is short; the traceback is in the file


def test_with_no_file_to_write_the_traceback_goes_to_stderr(tmp_path, monkeypatch, capsys):
    def crashing_app():
        raise KeyError("missing")

    monkeypatch.setattr(commands, "app", crashing_app)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    with pytest.raises(SystemExit) as exited:
        commands.main()
    stderr = capsys.readouterr().err
    assert exited.value.code == 70
    assert "Traceback (most recent call last)" in stderr and "the traceback is above; exit 70" in stderr


def test_the_engine_failing_is_still_3_and_70_is_documented_beside_the_others(monkeypatch, capsys):
    from orchestrator.runtime.base import RuntimeFault

    def engine_gone():
        raise RuntimeFault("connection refused")

    monkeypatch.setattr(commands, "app", engine_gone)
    with pytest.raises(SystemExit) as exited:
        commands.main()
    assert exited.value.code == 3
    assert "70 orchestra itself failed" in EXIT_CODES
    codes = [int(c) for c in re.findall(r"(?:^|; )(\d+) ", EXIT_CODES.split(": ", 1)[1])]
    assert codes == [0, 1, 2, 3, 4, 70, 130]  # one meaning each, 70 taken by nothing else
