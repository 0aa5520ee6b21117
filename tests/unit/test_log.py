"""events.jsonl after a process was killed mid-line: the next process's events start on a
line of their own."""

from __future__ import annotations

from orchestrator.log import _end_the_last_line


def test_a_half_written_last_line_is_ended_and_a_whole_file_left_alone(tmp_path):
    cases = {b"": b"", b'{"a": 1}\n': b'{"a": 1}\n', b'{"a": 1}\n{"b": ': b'{"a": 1}\n{"b": \n'}
    for before, after in cases.items():
        path = tmp_path / "events.jsonl"
        path.write_bytes(before)
        _end_the_last_line(path)
        assert path.read_bytes() == after
    _end_the_last_line(tmp_path / "none.jsonl")  # no file yet: nothing made
    assert not (tmp_path / "none.jsonl").exists()
