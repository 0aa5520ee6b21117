"""Grader for mb-generic (generic): exit 0 = reward 1. Checks only files in the workdir."""
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


sys.path.insert(0, os.getcwd())
try:
    import util
    ok = util.add(2, 3) == 5
except Exception:
    ok = False
sys.exit(0 if ok else 1)
