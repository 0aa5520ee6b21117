"""Grader for mb-paraphrase (paraphrase): exit 0 = reward 1. Checks only files in the workdir."""
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


ok = "pnpm install --tag=MEMKEY-PARA3X" in read("answer.txt")

print("PASS" if ok else "FAIL")
print("rule checked:", 'ok = "pnpm install --tag=MEMKEY-PARA3X" in read("answer.txt")')
print("answer.txt:", repr(read("answer.txt")[:300]) if os.path.exists("answer.txt") else "(absent)")
print("files in", os.getcwd() + ":", sorted(os.listdir("."))[:50])
sys.exit(0 if ok else 1)
