#!/bin/bash
python3 - <<'PY'
import csv, json
rows = list(csv.DictReader(open("/app/sales.csv")))
revenue = sum(int(r["qty"]) * float(r["price"]) for r in rows)
json.dump({"items": len(rows), "revenue": revenue}, open("/app/report.json", "w"))
PY
