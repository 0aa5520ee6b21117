#!/bin/bash
# reward 1 when the grader exits 0
mkdir -p /logs/verifier
if python3 /tests/grade.py; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
