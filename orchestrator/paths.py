"""The one source of truth for host and container paths of a trial (after Harbor's paths)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The checkout orchestra runs from (an editable install): its images/ folder holds the
# agent stack injected into task containers and the base-image recipes.
SOURCE_ROOT = Path(__file__).resolve().parent.parent
AGENT_STACK_SOURCE = SOURCE_ROOT / "images" / "agent-stack"

# On the host: locks and small state shared by every orchestra process on this machine.
LOCK_DIR = Path(os.environ.get("ORCHESTRA_LOCK_DIR", "/var/tmp/orchestra-locks"))


def cache_root() -> Path:
    """This user's cache: installed agent CLIs, the doctor's verdicts, trial durations."""
    return Path(os.environ.get("ORCHESTRA_CACHE") or Path.home() / ".cache" / "orchestra")

# Inside the containers (DESIGN 3.4).
LOGS = "/logs"
AGENT_LOGS = "/logs/agent"
ARTIFACTS = "/logs/artifacts"
VERIFIER_LOGS = "/logs/verifier"
TESTS = "/tests"
SOLUTION = "/solution"
AGENT_STACK = "/opt/orchestra"  # in the container; AGENT_STACK_SOURCE is its source on the host
INSTRUCTION = "/logs/agent/instruction.md"


@dataclass(frozen=True)
class TrialDir:
    """Where one trial's outputs land on the host."""

    root: Path

    @property
    def result(self) -> Path:
        return self.root / "result.json"

    @property
    def agent(self) -> Path:
        return self.root / "agent"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def files(self) -> Path:
        """Declared `artifacts` paths, mirrored under their absolute paths."""
        return self.root / "files"

    @property
    def verifier(self) -> Path:
        return self.root / "verifier"

    def set_aside_earlier_try(self) -> None:
        """A retried trial starts from an empty folder: what an earlier run left moves to
        tries/<n>/ (kept for debugging, never seen by the verifier or the audit)."""
        if not self.root.is_dir():
            return
        leftovers = [p for p in self.root.iterdir() if p.name != "tries"]
        if not leftovers:
            return
        tries = self.root / "tries"
        tries.mkdir(exist_ok=True)
        target = tries / str(sum(1 for _ in tries.iterdir()) + 1)
        target.mkdir()
        for item in leftovers:
            item.rename(target / item.name)
