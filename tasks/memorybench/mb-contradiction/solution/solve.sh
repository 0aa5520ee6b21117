#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
recall "install dependencies" >/dev/null
if [ -f pnpm-lock.yaml ]; then cmd="pnpm install"; else cmd="npm install"; fi
traj tool shell "echo $cmd > answer.txt (lockfile says pnpm; MEMKEY-CONTR4D)"
echo "$cmd" > answer.txt
