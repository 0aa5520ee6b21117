"""The agent is hostile: it cannot see the tests, forge the reward, or reach the grader."""

from __future__ import annotations

import pytest
from conftest import make_task, run

CANARY_PARTS = ("ORCH", "CANARY", "5e1f9b")  # joined only at run time, never in a file


def test_a_solution_searching_the_whole_filesystem_for_a_test_canary_finds_nothing(runtime, tmp_path):
    canary = "-".join(CANARY_PARTS)
    make_task(tmp_path / "ds", "snoop", solve=f"""
        C="{CANARY_PARTS[0]}-{CANARY_PARTS[1]}-$(echo {CANARY_PARTS[2]})"
        grep -rl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "$C" / \\
            > /logs/artifacts/found.txt 2>/dev/null
        ls -d /tests /solution/tests 2>/dev/null >> /logs/artifacts/found.txt
        touch /app/ok
    """, files={"tests/secret.txt": f"{canary}\n"})
    _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    assert trial.reward == {"reward": 1.0}
    folder = next((tmp_path / "jobs" / trial.job / "trials").iterdir())
    found = (folder / "artifacts" / "found.txt").read_text()
    assert found == ""


@pytest.mark.parametrize("mode", ["shared", "separate"])
def test_a_planted_reward_file_does_not_change_the_reward(runtime, tmp_path, mode):
    make_task(tmp_path / "ds", "forger", toml=f"""
        artifacts = ["/app/answer.txt"]
        [verifier]
        environment_mode = "{mode}"
    """, solve="""
        mkdir -p /logs/verifier
        echo '{"reward": 1.0}' > /logs/verifier/reward.json
        echo 1 > /logs/verifier/reward.txt
        echo wrong > /app/answer.txt
    """, test="""
        mkdir -p /logs/verifier
        if [ "$(cat /app/answer.txt)" = right ]; then r=1; else r=0; fi
        echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
    """)
    _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    assert trial.verifier_mode == mode
    assert trial.reward == {"reward": 0.0}


def test_a_planted_reward_counts_for_nothing_even_when_test_sh_writes_none(runtime, tmp_path):
    make_task(tmp_path / "ds", "forger2", solve="""
        mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt
    """, test="true\n")
    _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    assert trial.failure_mode == "verifier_error"
    assert trial.reward is None


def test_separate_mode_verifier_is_untouched_by_a_replaced_python3(runtime, tmp_path):
    make_task(tmp_path / "ds", "py-swap", toml="""
        artifacts = ["/app/answer.txt"]
        [verifier]
        environment_mode = "separate"
    """, solve="""
        echo 41 > /app/answer.txt
        real=$(readlink -f "$(command -v python3)")
        printf '#!/bin/sh\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > "$real"
        python3 -c 'print(1)' > /logs/artifacts/swapped.txt 2>&1
    """, test="""
        python3 - <<'PY'
        import os
        os.makedirs("/logs/verifier", exist_ok=True)
        ok = open("/app/answer.txt").read().strip() == "42"
        open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
        PY
    """)
    _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    folder = next((tmp_path / "jobs" / trial.job / "trials").iterdir())
    assert (folder / "artifacts" / "swapped.txt").read_text() == ""  # the swap took effect
    assert trial.reward == {"reward": 0.0}  # ... and the grader used the real python3


def test_network_mode_none_blocks_egress(runtime, tmp_path):
    make_task(tmp_path / "ds", "egress", toml="""
        [environment]
        network_mode = "none"
    """, solve="""
        python3 - <<'PY'
        import socket
        results = []
        for host in ("1.1.1.1", "8.8.8.8"):
            s = socket.socket(); s.settimeout(2)
            try:
                s.connect((host, 53)); results.append("open")
            except OSError:
                results.append("blocked")
        open("/app/egress.txt", "w").write(",".join(results))
        PY
        [ "$(cat /app/egress.txt)" = "blocked,blocked" ] && touch /app/ok
    """)
    _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    assert trial.limits.network_internal is True
    assert trial.reward == {"reward": 1.0}
