#!/bin/bash
# Like an agent would: read the channel, answer in the thread with chan.
set -euo pipefail
python3 - <<'PY'
import json, re, subprocess

def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout

me = json.loads(run("chan", "whoami"))["pubkey"]
messages = json.loads(run("chan", "read", "--json"))
asks = [m for m in messages if m["author_role"] == "user"]
question = [m for m in asks if me in m["mentioned_pubkeys"]][-1]
units = {m["author"]: int(re.search(r"(\d+) units", m["content"]).group(1)) for m in messages if m["author_role"] == "actor"}
total = (units["north"] + units["south"] - units["reserve"]) * 3
run("chan", "reply", question["id"], f"Combined figure: {total}")
PY
