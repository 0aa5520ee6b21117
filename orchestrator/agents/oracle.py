"""oracle: copies solution/ in and runs solve.sh. The only agent that sees a solution."""

from __future__ import annotations

from orchestrator.agents.base import Plain
from orchestrator.errors import InputError
from orchestrator.paths import SOLUTION
from orchestrator.tasks import Task


class OracleAgent(Plain):
    name = "oracle"

    def files(self, task: Task) -> dict[str, bytes]:
        folder = task.solution_dir  # a step's own solution for a step
        if not task.solve_sh.is_file():
            raise InputError(f"{task.solve_sh}: missing (the oracle agent needs it)")
        return {
            f"{SOLUTION}/{p.relative_to(folder).as_posix()}": p.read_bytes()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }

    def env(self, task: Task) -> dict[str, str]:
        return {}

    def command(self, task: Task) -> str | None:
        return f"bash {SOLUTION}/solve.sh"
