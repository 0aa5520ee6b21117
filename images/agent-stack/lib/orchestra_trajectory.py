"""Append records to /logs/agent/trajectory.jsonl (DESIGN 3.6). Stdlib only."""

import fcntl
import json
import os

PATH = os.environ.get("ORCHESTRA_TRAJECTORY", "/logs/agent/trajectory.jsonl")


def append(record, path=PATH):
    """Add one record with the next `seq`; safe across processes (a file lock)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        seq = sum(1 for _ in handle)
        handle.write(json.dumps(dict(seq=seq, **record), ensure_ascii=False) + "\n")
        fcntl.flock(handle, fcntl.LOCK_UN)
    return seq


def event(kind, text="", tool=None):
    body = {"kind": kind, "text": text}
    if tool is not None:
        body["tool"] = tool
    return append({"event": body})


def memory_recall(hit_ids, used_chars, suppressed, top1=None, shadow=None):
    """`top1`: the primary retriever's best id; `shadow`: {"retriever", "top1"} of the V2
    shadow retriever run on the same query (orchestra_memory.shadow_top1)."""
    record = {"hits": [{"id": h} for h in hit_ids], "used_chars": used_chars, "suppressed": suppressed}
    if shadow is not None:
        record["top1"] = top1
        record["shadow"] = shadow
    return append({"memory_recall": record})
