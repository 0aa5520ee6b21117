#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
cmd=$(recall "tool that installs dependencies" | grep -o "pnpm install --tag=MEMKEY-[A-Z0-9]*" | head -1)
traj tool shell "echo '$cmd' > answer.txt"
echo "$cmd" > answer.txt
