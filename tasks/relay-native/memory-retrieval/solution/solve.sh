#!/bin/bash
# Like an agent would: list my memories, read them, pick the one that answers the
# question, and reply in the user's thread.
set -euo pipefail
python3 - <<'PY'
import json, re, subprocess

def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout

me = json.loads(run("chan", "whoami"))["pubkey"]
question = [m for m in json.loads(run("chan", "read", "--json"))
            if m["author_role"] == "user" and me in m["mentioned_pubkeys"]][-1]
answer = None
for engram in json.loads(run("mem", "ls", "--json")):
    value = run("mem", "get", engram["slug"])
    if "April 2024" in value and "total customers" in value:
        answer = re.search(r"([\d,]+) total customers", value).group(1)
if answer is None:
    raise SystemExit("no memory answers the question")
run("chan", "reply", question["id"], f"We had {answer} total customers in April 2024.")
PY
