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

print("PASS" if ok else "FAIL")
print("rule checked:", 'lines = read("notes.txt").splitlines()\nok = bool(lines) and "MEMKEY-PIN4D" in lines[0] and "hello" in [l.strip() for l in lines]')
print("answer.txt:", repr(read("answer.txt")[:300]) if os.path.exists("answer.txt") else "(absent)")
print("files in", os.getcwd() + ":", sorted(os.listdir("."))[:50])
sys.exit(0 if ok else 1)
