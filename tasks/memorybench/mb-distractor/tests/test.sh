#!/bin/bash
# reward 1 when the grader exits 0
mkdir -p /logs/verifier
if python3 /tests/grade.py; then r=1; else r=0; fi
echo $r > /logs/verifier/reward.txt
