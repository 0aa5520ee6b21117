"""Grader for mb-update (update): exit 0 = reward 1. Checks only files in the workdir."""
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


answer = read("answer.txt")
ok = "https://api.v2.example" in answer and "https://api.v1.example" not in answer

print("PASS" if ok else "FAIL")
print("rule checked:", 'answer = read("answer.txt")\nok = "https://api.v2.example" in answer and "https://api.v1.example" not in answer')
print("answer.txt:", repr(read("answer.txt")[:300]) if os.path.exists("answer.txt") else "(absent)")
print("files in", os.getcwd() + ":", sorted(os.listdir("."))[:50])
sys.exit(0 if ok else 1)
