#!/usr/bin/env python3
"""Writes the twelve memorybench tasks (SPEC-TASKS B) as plain files. Run it after editing;
its output is committed, so a task is readable without running anything.

    python3 tasks/memorybench/generate.py
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOPICS = ["cache eviction tuning", "logo color palette", "office wifi setup", "sprint retro cadence",
          "docker registry mirror", "S3 bucket lifecycle", "oncall rotation", "email templates",
          "font licensing", "meeting notes location"]

GRADE_HEAD = '''"""Grader for {name} ({cls}): exit 0 = reward 1. Checks only files in the workdir."""
import os
import re
import sys

os.chdir(os.environ.get("MB_WORKDIR", "/app"))


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


'''


def fact(name, description, body, *, scope="project", subject_key=None, keywords=None,
         pinned=False, volatility=None, created=None, updated=None):
    lines = ["---", f"name: {name}", f"description: {description}", "metadata:",
             f"  type: {scope}", f"  scope: {scope}"]
    if subject_key:
        lines.append(f"subject_key: {subject_key}")
    if keywords:
        lines.append("keywords: [" + ", ".join(keywords) + "]")
    if pinned:
        lines.append("activation: pinned")
    if volatility:
        lines.append(f"volatility: {volatility}")
    if created:
        lines.append(f"created: {created}")
    if updated:
        lines.append(f"updated: {updated}")
    lines += ["---", "", body.strip(), ""]
    return scope, name, "\n".join(lines)


# Every grader says why: the rule it checked and what it found, so test-stdout.txt is
# never empty (the viewer and JUnit show it).
GRADE_TAIL = """
print("PASS" if ok else "FAIL")
print("rule checked:", {rule})
print("answer.txt:", repr(read("answer.txt")[:300]) if os.path.exists("answer.txt") else "(absent)")
print("files in", os.getcwd() + ":", sorted(os.listdir("."))[:50])
sys.exit(0 if ok else 1)
"""

SOLVE_HEAD = """#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
"""

TASKS = {
    "mb-exact": dict(
        cls="exact", markers=["MEMKEY-EXACT7Q"],
        instruction="Write this project's canonical fast-check command (the exact command line, nothing else) into answer.txt.",
        facts=[fact("fast-check-command", "The canonical fast-check command of this project",
                    "The canonical fast-check command for this project is `make check-fast --tag=MEMKEY-EXACT7Q`. Run it before every push.")],
        grade='ok = "make check-fast --tag=MEMKEY-EXACT7Q" in read("answer.txt")\n',
        solve='cmd=$(recall "canonical fast check command" | grep -o "make check-fast --tag=MEMKEY-[A-Z0-9]*" | head -1)\n'
              'traj tool shell "echo \'$cmd\' > answer.txt"\necho "$cmd" > answer.txt\n'),
    "mb-paraphrase": dict(
        cls="paraphrase", markers=["MEMKEY-PARA3X"],
        instruction="Which tool installs this project's dependencies? Write the install command into answer.txt.",
        facts=[fact("package-manager", "How dependencies are installed here",
                    "We migrated from npm to pnpm last year. Install dependencies with `pnpm install --tag=MEMKEY-PARA3X`.",
                    keywords=["dependencies", "install", "package manager", "依赖", "安装", "包管理器"])],
        grade='ok = "pnpm install --tag=MEMKEY-PARA3X" in read("answer.txt")\n',
        solve='cmd=$(recall "tool that installs dependencies" | grep -o "pnpm install --tag=MEMKEY-[A-Z0-9]*" | head -1)\n'
              'traj tool shell "echo \'$cmd\' > answer.txt"\necho "$cmd" > answer.txt\n'),
    "mb-cjk": dict(
        cls="cjk", markers=["MEMKEY-CJK5T"],
        instruction="请按照本项目的约定，在仓库根目录创建一个空的数据库迁移文件，用于给用户表添加邮箱字段。",
        facts=[fact("migration-naming", "数据库迁移文件的命名约定",
                    "数据库迁移文件统一放在仓库根目录，文件名格式为 `MEMKEY-CJK5T-<描述>.sql`，例如 `MEMKEY-CJK5T-add-index.sql`。",
                    keywords=["数据库", "迁移", "migration", "sql", "命名"])],
        grade='ok = any(re.match(r"^MEMKEY-CJK5T-.*\\.sql$", name) for name in os.listdir("."))\n',
        solve='prefix=$(recall "数据库迁移文件 命名 约定" | grep -o "MEMKEY-[A-Z0-9]*-" | head -1)\n'
              '[ -n "$prefix" ] || exit 1\ntraj tool shell "touch ${prefix}add-user-email.sql"\ntouch "${prefix}add-user-email.sql"\n'),
    "mb-symbol": dict(
        cls="symbol", markers=["MEMKEY-SYM2R"],
        instruction="Set the retry max backoff to 250 in this project's configuration.",
        facts=[fact("retry-limits-location", "Where retry limits are configured",
                    "Retry limits live in `policy/retry.toml` under the key `max_backoff_ms` (MEMKEY-SYM2R). Never put them in `.env`.",
                    keywords=["retry", "backoff", "config", "limits"])],
        workdir={"policy/retry.toml": "# retry policy\nmax_attempts = 5\nmax_backoff_ms = 4000\n",
                 ".env": "APP_NAME=demo\nLOG_LEVEL=info\n"},
        grade='ok = re.search(r"(?m)^max_backoff_ms = 250$", read("policy/retry.toml")) is not None\n'
              'ok = ok and "MAX_BACKOFF" not in read(".env").upper()\n',
        solve='file=$(recall "retry max backoff configuration" | grep -o "policy/[a-z_]*\\.toml" | head -1)\n'
              '[ -n "$file" ] || { echo "MAX_BACKOFF_MS=250" >> .env; exit 0; }\n'
              'traj tool shell "sed -i s/^max_backoff_ms = .*/max_backoff_ms = 250/ $file (MEMKEY-SYM2R)"\n'
              'sed -i "s/^max_backoff_ms = .*/max_backoff_ms = 250/" "$file"\n'),
    "mb-distractor": dict(
        cls="distractor", markers=["MEMKEY-DIST5Q"],
        instruction="Write this project's canonical fast-check command (the exact command line, nothing else) into answer.txt.",
        facts=[fact("fast-check-command", "The canonical fast-check command of this project",
                    "The canonical fast-check command for this project is `make check-fast --tag=MEMKEY-DIST5Q`. Run it before every push.")]
              + [fact(f"distractor-{n:03d}", f"Note about {TOPICS[n % 10]} #{n}",
                      f"Historical note #{n} about {TOPICS[n % 10]}. It has no bearing on build or check commands.")
                 for n in range(100)],
        grade='ok = "make check-fast --tag=MEMKEY-DIST5Q" in read("answer.txt")\n',
        solve='cmd=$(recall "canonical fast check command" | grep -o "make check-fast --tag=MEMKEY-[A-Z0-9]*" | head -1)\n'
              'traj tool shell "echo \'$cmd\' > answer.txt"\necho "$cmd" > answer.txt\n'),
    "mb-conflict": dict(
        cls="conflict", markers=["MEMKEY-CONF8E"],
        instruction="Write this project's deploy region into answer.txt.",
        facts=[fact("deploy-region-default", "Default deploy region for all projects",
                    "All services deploy to us-east-1 unless a project says otherwise.",
                    scope="global", subject_key="deploy-region", keywords=["deploy", "region", "aws"]),
               fact("deploy-region", "Deploy region of this project",
                    "This project deploys to eu-central-1 (data residency; MEMKEY-CONF8E). It overrides the global default.",
                    subject_key="deploy-region", keywords=["deploy", "region", "aws"])],
        grade='answer = read("answer.txt")\nok = "eu-central-1" in answer and "us-east-1" not in answer\n',
        solve='region=$(recall "deploy region" | grep -o "[a-z][a-z]-[a-z]*-[0-9]" | head -1)\n'
              'traj tool shell "echo $region > answer.txt (MEMKEY-CONF8E)"\necho "$region" > answer.txt\n'),
    "mb-stale": dict(
        cls="stale", markers=["MEMKEY-STAL3B"],
        instruction="Confirm the current release branch of this project and write it into answer.txt.",
        facts=[fact("release-branch", "The release branch",
                    "As of March 2024 the release branch is release/0.9 (MEMKEY-STAL3B). Check the RELEASE file: this changes every cycle.",
                    volatility="volatile", created="2024-03-02", updated="2024-03-02",
                    keywords=["release", "branch"])],
        workdir={"RELEASE": "release/1.21\n"},
        grade='answer = read("answer.txt")\nok = "release/1.21" in answer and "release/0.9" not in answer\n',
        solve='recall "current release branch" >/dev/null\n'
              'traj tool shell "cat RELEASE > answer.txt"\ncat RELEASE > answer.txt\n'),
    "mb-contradiction": dict(
        cls="contradiction", markers=["MEMKEY-CONTR4D"],
        instruction="Write the command that installs this project's dependencies into answer.txt.",
        facts=[fact("install-npm", "Installing dependencies (old note)",
                    "Install dependencies with npm install.", keywords=["install", "dependencies"],
                    created="2023-05-01"),
               fact("install-pnpm", "Installing dependencies",
                    "We migrated to pnpm (MEMKEY-CONTR4D); install dependencies with pnpm install. The lockfile is pnpm-lock.yaml.",
                    keywords=["install", "dependencies", "pnpm"], created="2024-06-01")],
        workdir={"pnpm-lock.yaml": "lockfileVersion: '9.0'\n", "package.json": '{"name": "demo"}\n'},
        grade='answer = read("answer.txt")\nok = "pnpm install" in answer and re.search(r"(?<!p)npm install", answer) is None\n',
        solve='recall "install dependencies" >/dev/null\n'
              'if [ -f pnpm-lock.yaml ]; then cmd="pnpm install"; else cmd="npm install"; fi\n'
              'traj tool shell "echo $cmd > answer.txt (lockfile says pnpm; MEMKEY-CONTR4D)"\necho "$cmd" > answer.txt\n'),
    "mb-generic": dict(
        cls="generic", markers=[],
        instruction="Add a function add(a, b) to util.py that returns a + b.",
        facts=[fact("coffee-machine", "Office coffee machine", "The coffee machine on floor 3 needs descaling every Friday."),
               fact("standup-time", "Daily standup", "Standup is at 9:30 in the small meeting room.")],
        workdir={"util.py": "def sub(a, b):\n    return a - b\n"},
        grade='sys.path.insert(0, os.getcwd())\ntry:\n    import util\n    ok = util.add(2, 3) == 5\nexcept Exception:\n    ok = False\n',
        solve='recall "add function util.py" >/dev/null\n'
              'traj tool write_file "util.py"\nprintf "\\n\\ndef add(a, b):\\n    return a + b\\n" >> util.py\n'),
    "mb-history": dict(
        cls="history", markers=["MEMKEY-HIST6M"],
        instruction="Copy the exact server timeout line from config/server.conf into answer.txt.",
        facts=[fact("server-timeout", "Server timeout", "The server timeout is roughly 45 s; it was tuned for p99 latency.",
                    keywords=["server", "timeout"])],
        workdir={"config/server.conf": "listen = 0.0.0.0:8080\nworkers = 4\ntimeout_seconds = 47   # MEMKEY-HIST6M tuned for p99\nkeepalive = true\n"},
        grade='ok = "timeout_seconds = 47   # MEMKEY-HIST6M tuned for p99" in read("answer.txt")\n',
        solve='recall "server timeout" >/dev/null\n'
              'traj tool shell "grep ^timeout_seconds config/server.conf > answer.txt"\ngrep "^timeout_seconds" config/server.conf > answer.txt\n'),
    "mb-update": dict(
        cls="update", markers=["MEMKEY-UPD9K"],
        instruction="Write the current API base URL of this project into answer.txt.",
        facts=[fact("api-base-url-v1", "API base URL (2023)", "The API base URL is https://api.v1.example.",
                    subject_key="api-base-url", created="2023-01-10", keywords=["api", "url", "base"]),
               fact("api-base-url", "API base URL", "https://api.v2.example replaced https://api.v1.example as the API base URL (MEMKEY-UPD9K).",
                    subject_key="api-base-url", created="2024-09-01", updated="2024-09-01", keywords=["api", "url", "base"])],
        grade='answer = read("answer.txt")\nok = "https://api.v2.example" in answer and "https://api.v1.example" not in answer\n',
        solve='url=$(recall "current API base URL" | grep -o "https://api.v[0-9]*.example replaced" | head -1 | cut -d" " -f1)\n'
              'traj tool shell "echo $url > answer.txt (MEMKEY-UPD9K)"\necho "$url" > answer.txt\n'),
    "mb-pin": dict(
        cls="pinned", markers=["MEMKEY-PIN4D"], markers_in_prefix=True,
        instruction="Create notes.txt with one line: hello",
        facts=[fact("file-header-rule", "House rule for new text files",
                    "Every new text file's first line is `# MEMKEY-PIN4D`.", pinned=True)],
        grade='lines = read("notes.txt").splitlines()\nok = bool(lines) and "MEMKEY-PIN4D" in lines[0] and "hello" in [l.strip() for l in lines]\n',
        solve='header=$(recall --pinned | grep -o "# MEMKEY-[A-Z0-9]*" | head -1)\n'
              'traj tool write_file "notes.txt: $header / hello"\n'
              'if [ -n "$header" ]; then printf "%s\\nhello\\n" "$header" > notes.txt; else echo hello > notes.txt; fi\n'),
}


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def main() -> None:
    for name, spec in TASKS.items():
        root = HERE / name
        if root.exists():
            shutil.rmtree(root)
        markers = ", ".join(f'"{m}"' for m in spec["markers"])
        write(root / "task.toml", textwrap.dedent(f"""\
            # memorybench {spec['cls']} scenario (SPEC-TASKS B). Generated by ../generate.py.
            schema_version = "1.0"
            artifacts = ["/app"]

            [task]
            name = "memorybench/{name}"
            description = "memorybench {spec['cls']}: does memory help, and is it the memory that helped?"
            keywords = ["memorybench", "memory", "{spec['cls']}"]

            [metadata]
            category = "memory"
            class = "{spec['cls']}"

            [agent]
            timeout_sec = 180.0

            [verifier]
            timeout_sec = 60.0
            environment_mode = "separate"

            [environment]
            cpus = 1
            memory_mb = 512
            storage_mb = 256
            network_mode = "none"

            [memory]
            markers = [{markers}]
            markers_in_prefix = {"true" if spec.get("markers_in_prefix") else "false"}
            """))
        write(root / "instruction.md", spec["instruction"] + "\n")
        write(root / "environment/Dockerfile", "FROM python:3.12-slim-bookworm\nWORKDIR /app\n")
        for scope, fact_name, text in spec["facts"]:
            write(root / "memory" / scope / f"{fact_name}.md", text)
        for rel, text in spec.get("workdir", {}).items():
            write(root / "workdir" / rel, text)
        write(root / "tests/grade.py", GRADE_HEAD.format(name=name, cls=spec["cls"]) + spec["grade"]
              + GRADE_TAIL.format(rule=repr(spec["grade"].strip())))
        write(root / "tests/test.sh", "#!/bin/bash\n# reward 1 when the grader exits 0\nmkdir -p /logs/verifier\n"
              "if python3 /tests/grade.py; then r=1; else r=0; fi\necho $r > /logs/verifier/reward.txt\n", 0o755)
        write(root / "solution/solve.sh", SOLVE_HEAD + spec["solve"], 0o755)


if __name__ == "__main__":
    main()
