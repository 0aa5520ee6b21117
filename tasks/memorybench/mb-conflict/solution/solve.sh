#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
region=$(recall "deploy region" | grep -o "[a-z][a-z]-[a-z]*-[0-9]" | head -1)
traj tool shell "echo $region > answer.txt (MEMKEY-CONF8E)"
echo "$region" > answer.txt
