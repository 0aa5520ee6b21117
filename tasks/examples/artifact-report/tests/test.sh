#!/bin/bash
# Reward 1 when /app/report.json says 3 items and revenue 6.0 (3*0.5 + 2*1.25 + 10*0.2).
mkdir -p /logs/verifier
python3 - <<'PY'
import json
try:
    report = json.load(open("/app/report.json"))
    ok = report.get("items") == 3 and abs(float(report.get("revenue")) - 6.0) < 1e-9
except Exception as exc:
    print("unreadable report:", exc)
    ok = False
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
PY
