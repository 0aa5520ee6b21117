#!/bin/bash
# Grades relay-evidence.json only; verify.py always exits 0 and writes reward.json.
mkdir -p /logs/verifier
python3 /tests/verify.py --evidence /logs/artifacts/relay-evidence.json \
  --reward /logs/verifier/reward.json --details /logs/verifier/details.json
exit 0
