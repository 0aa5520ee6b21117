"""Grader for mb-exact (exact): exit 0 = reward 1. Checks only files in the workdir."""
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


ok = "make check-fast --tag=MEMKEY-EXACT7Q" in read("answer.txt")

print("PASS" if ok else "FAIL")
print("rule checked:", 'ok = "make check-fast --tag=MEMKEY-EXACT7Q" in read("answer.txt")')
print("answer.txt:", repr(read("answer.txt")[:300]) if os.path.exists("answer.txt") else "(absent)")
print("files in", os.getcwd() + ":", sorted(os.listdir("."))[:50])
sys.exit(0 if ok else 1)
