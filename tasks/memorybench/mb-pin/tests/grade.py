"""Grader for mb-pin (pinned): exit 0 = reward 1. Checks only files in the workdir."""
import os
import re
import sys

os.chdir(os.environ.get("MB_WORKDIR", "/app"))


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


lines = read("notes.txt").splitlines()
ok = bool(lines) and "MEMKEY-PIN4D" in lines[0] and "hello" in [l.strip() for l in lines]
sys.exit(0 if ok else 1)
