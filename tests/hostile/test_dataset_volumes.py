"""A dataset's compose file declares a named volume and the agent fills it (DESIGN 4): the
trial's storage_mb is its disk, the volume's too. The agent writes 1 MB at a time into the
volume until something stops it and records how far it got (the positive control), then
test.sh grades 1 only if more than the trial's whole disk went in. tests/hostile/README.md
has the row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import make_task

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
STORAGE_MB = 64
COMPOSE = "services:\n  main:\n    volumes:\n      - data:/data\nvolumes:\n  data:\n"
FILL = r"""python3 - <<'EOF' > /logs/agent/volume.json
import errno, json
written, why = 0, "none"
try:
    with open("/data/blob", "wb") as f:
        while written < 4 * %d:
            f.write(b"x" * (1 << 20)); f.flush(); written += 1
except OSError as exc:
    why = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps({"written_mb": written, "stopped_by": why}))
EOF
touch /app/ok
""" % STORAGE_MB
ESCAPED = ("mkdir -p /logs/verifier\nsize=$(stat -c %%s /data/blob 2>/dev/null || echo 0)\n"
           "[ \"$size\" -gt %d ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
           % (STORAGE_MB * 1024 * 1024))


def test_a_named_compose_volume_is_held_to_storage_mb(runtime, tmp_path):
    make_task(tmp_path / "ds", "volume-fill", solve=FILL, test=ESCAPED,
              toml=f"[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = {STORAGE_MB}\n",
              files={"environment/docker-compose.yaml": COMPOSE})
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q",
                           "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "vol"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    (trial,) = (tmp_path / "jobs/vol/trials").iterdir()
    result = json.loads((trial / "result.json").read_text())
    filled = json.loads((trial / "agent/volume.json").read_text())
    # positive control: the agent wrote into the volume until something stopped it
    assert filled["written_mb"] >= STORAGE_MB // 2, filled
    # outcome: the trial's own disk stopped it, well short of four times storage_mb
    assert filled["stopped_by"] == "ENOSPC" and filled["written_mb"] <= STORAGE_MB, filled
    assert result["reward"] is None or result["reward"]["reward"] == 0.0, result


# orchestra with loop disks forced off, as on an engine without root, mkfs.ext4 or
# /dev/loop-control (the Docker runtime reads loop_disks_available when it is made)
NO_LOOP_DISKS = ("import sys, orchestrator.runtime.disk as disk\n"
                 "disk.loop_disks_available = lambda: False\n"
                 "from orchestrator.cli.commands import main\n"
                 "sys.argv[0] = 'orchestra'\n"
                 "sys.exit(main())\n")


def test_a_named_volume_where_no_loop_disk_can_hold_it_is_refused_before_any_spend(runtime, tmp_path):
    make_task(tmp_path / "ds", "volume-fill", solve=FILL, test=ESCAPED,
              toml=f"[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = {STORAGE_MB}\n",
              files={"environment/docker-compose.yaml": COMPOSE})
    args = ["run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q", "--jobs-dir",
            str(tmp_path / "jobs"), "--job-name", "unbounded"]
    # the case is real: orchestra runs without loop disks (--require disk-quota says so)
    doctor = subprocess.run([sys.executable, "-c", NO_LOOP_DISKS, *args, "--require", "disk-quota"],
                            capture_output=True, text=True, timeout=300)
    assert doctor.returncode == 2 and "loop disks need root" in doctor.stderr, doctor.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-c", NO_LOOP_DISKS, *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "volume-fill/environment/docker-compose.yaml: field 'volumes.data'" in proc.stderr
    assert f"storage_mb ({STORAGE_MB} MB)" in proc.stderr and "refused rather than run unbounded" in proc.stderr
    assert "Traceback" not in proc.stderr
    # nothing started: no trial folder, no volume, no container of this job
    trials = tmp_path / "jobs/unbounded/trials"
    assert not trials.exists() or not any(trials.iterdir())
    for kind in (["volume", "ls"], ["ps", "-a"]):
        listed = subprocess.run(["docker", *kind, "-q", "--filter", "label=orchestra.job=unbounded"],
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and listed.stdout.strip() == "", kind
