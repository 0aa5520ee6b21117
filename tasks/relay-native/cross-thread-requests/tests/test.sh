#!/bin/bash
mkdir -p /logs/verifier
python3 /tests/verify.py --evidence /logs/artifacts/relay-evidence.json \
  --reward /logs/verifier/reward.json --details /logs/verifier/details.json
exit 0
