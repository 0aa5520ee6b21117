"""The doctor's verdict is a typed model (Diagnosis, its stand-ins StandInRecords), and its
cache files keep their shape: an entry written before (json.dumps(asdict(...), sort_keys=True),
stand-ins as plain objects without their empty fields) still loads, and one written now reads
as the same JSON the doctor always printed."""

import json

from conftest import make_task

from orchestrator.job import doctor
from orchestrator.models import StandInRecord
from orchestrator.tasks import load_task

# A cache entry as the dataclass Diagnosis wrote it (before issue 47), byte for byte in shape
OLD_ENTRY = {
    "checked_at": 1764000000.5, "content_hash": "{hash}", "leak_scan": "clean", "leaks": [],
    "nop": 0.0, "oracle": 0.0, "path": "{path}", "reason": "oracle 0: stood in by orchestra/base:bookworm",
    "stand_ins": [{"python": "3.11", "reason": "offline", "reference": "python:3.12.9-slim",
                   "release": "bookworm", "stand_in": "orchestra/base:bookworm"}],
    "task": "t", "verdict": "broken",
}


def test_an_old_cache_entry_loads_as_typed_stand_ins(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_CACHE", str(tmp_path / "cache"))
    task = load_task(make_task(tmp_path / "ds", "t"))
    entry = {**OLD_ENTRY, "content_hash": task.content_hash, "path": str(task.path)}
    path = doctor.cache_dir() / f"{doctor.cache_key(task)}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(entry, indent=2, sort_keys=True) + "\n")
    found = doctor.cached(task)
    assert found is not None and found.verdict == "broken" and found.checked_at == 1764000000.5
    assert found.stand_ins == [StandInRecord(reference="python:3.12.9-slim", stand_in="orchestra/base:bookworm",
                                             release="bookworm", python="3.11", reason="offline")]
    # written back now, it is the same JSON (no `warning: null` added), keys aside
    assert json.loads(found.model_dump_json()) == entry
    plan = doctor.skipped_by_run([task])
    assert plan.left == [found] and plan.keep == []


def test_a_cache_entry_of_another_shape_is_redone_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_CACHE", str(tmp_path / "cache"))
    task = load_task(make_task(tmp_path / "ds", "t"))
    path = doctor.cache_dir() / f"{doctor.cache_key(task)}.json"
    path.parent.mkdir(parents=True)
    for text in ('{"task": "t"}', json.dumps({**OLD_ENTRY, "surprise": 1}), "not json",
                 json.dumps({**OLD_ENTRY, "stand_ins": [{"reference": "x"}]})):
        path.write_text(text)
        assert doctor.cached(task) is None, text
