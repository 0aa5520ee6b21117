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
run("chan", "reply", question["id"], "2 plus 3 is 5.")
other = [m for m in asks if m["id"] != question["id"]][-1]
run("chan", "reply", other["id"], "10 minus 4 is 6.")
PY
