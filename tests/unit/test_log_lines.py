"""What `orchestrator.log.configure` writes: a line a person reads on stderr (warnings and
worse unless verbose), every event as one JSON object per line into the job's events.jsonl,
a live secret scrubbed from both, other libraries' records too."""

from __future__ import annotations

import json
import logging

import pytest

from orchestrator import log, scrub


@pytest.fixture
def configured(tmp_path):
    yield tmp_path / "events.jsonl"
    logging.basicConfig(handlers=[logging.NullHandler()], force=True)  # the file closed


def test_stderr_gets_a_readable_line_the_file_a_json_line_and_the_secret_neither(configured, capsys):
    secret = "sk-live-" + "q7" * 12
    scrub.register(secret)
    try:
        log.configure(verbose=False, json_file=configured)
        log.get_logger().warning("image.stand_in", reference="python:3.10-slim", key=secret)
        log.get_logger().info("trial.phase", phase="agent")  # the file's only: below warning
        logging.getLogger("urllib3").warning("retrying with %s", secret)  # another library's
    finally:
        scrub.unregister(secret)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and not err[0].startswith("{"), err
    assert "[warning" in err[0] and "image.stand_in" in err[0] and "reference=python:3.10-slim" in err[0]
    assert "retrying with" in err[1]
    events = [json.loads(line) for line in configured.read_text().splitlines()]
    assert [e["event"] for e in events] == ["image.stand_in", "trial.phase", f"retrying with {scrub.REDACTED}"]
    assert events[0]["level"] == "warning" and events[0]["reference"] == "python:3.10-slim"
    assert not any(key.startswith("_") for e in events for key in e)  # no formatter internals
    assert secret not in configured.read_text() and all(secret not in line for line in err)
