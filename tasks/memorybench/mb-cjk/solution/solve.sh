#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
prefix=$(recall "数据库迁移文件 命名 约定" | grep -o "MEMKEY-[A-Z0-9]*-" | head -1)
[ -n "$prefix" ] || exit 1
traj tool shell "touch ${prefix}add-user-email.sql"
touch "${prefix}add-user-email.sql"
