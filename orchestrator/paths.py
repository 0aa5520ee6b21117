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

    @property
    def agent_stdout(self) -> Path:
        return self.agent / "stdout.txt"

    @property
    def agent_stderr(self) -> Path:
        return self.agent / "stderr.txt"

    @property
    def verifier_stdout(self) -> Path:
        """What test.sh printed (a multi-step trial's steps: steps/<name>/verifier/)."""
        return self.verifier / "test-stdout.txt"

    def step_verifier_stdouts(self) -> list[Path]:
        """Each step's test.sh output in a multi-step trial, in name order."""
        return sorted(self.root.glob("steps/*/verifier/test-stdout.txt"))

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


@dataclass(frozen=True)
class TaskPaths:
    """Where a task's parts are in its folder on the host (Harbor's task layout). A step of a
    multi-step task (`step(name)`) has the same layout for its instruction, tests and solution."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "task.toml"

    @property
    def instruction(self) -> Path:
        return self.root / "instruction.md"

    @property
    def environment(self) -> Path:
        """The task image's build context."""
        return self.root / "environment"

    @property
    def dockerfile(self) -> Path:
        return dockerfile_in(self.environment)

    @property
    def tests(self) -> Path:
        return self.root / "tests"

    @property
    def test_sh(self) -> Path:
        return self.tests / "test.sh"

    def step(self, name: str) -> TaskPaths:
        """One of Harbor's [[steps]]: its own folder under steps/."""
        return TaskPaths(self.root / "steps" / name)

    @property
    def solution(self) -> Path:
        return self.root / "solution"

    @property
    def solve_sh(self) -> Path:
        return self.solution / "solve.sh"


def dockerfile_in(context: Path) -> Path:
    """A build context's Dockerfile (the only name orchestra builds from)."""
    return context / "Dockerfile"


def verifier_dockerfile(tests: Path) -> Path:
    """A tests folder's Dockerfile: Harbor's separate verifier image is built from it."""
    return dockerfile_in(tests)


@dataclass(frozen=True)
class JobDir:
    """Where one job's outputs land on the host: its config, its result, a folder per trial."""

    root: Path

    @property
    def config(self) -> Path:
        """config.json: what --resume and the viewer read back."""
        return self.root / "config.json"

    @property
    def result(self) -> Path:
        return self.root / "result.json"

    @property
    def events(self) -> Path:
        """events.jsonl: the job's structlog events (orchestrator.log.configure)."""
        return self.root / "events.jsonl"

    @property
    def trials(self) -> Path:
        return self.root / "trials"

    def trial_folders(self) -> list[Path]:
        """Every trial's folder (finished or not), in name order; links are not followed."""
        if not self.trials.is_dir():
            return []
        return sorted(p for p in self.trials.iterdir() if p.is_dir() and not p.is_symlink())

    def find_trial(self, trial_id: str) -> Path | None:
        """A trial's folder by its id (the name ends in its first 12 hex digits:
        models.result trial_folder_name); None if the job has none."""
        return next(iter(sorted(self.trials.glob(f"*__{trial_id[:12]}"))), None)

    def trial(self, folder: str) -> TrialDir:
        """A trial's folder by its name (models.result trial_folder_name)."""
        return TrialDir(self.trials / folder)

    def trial_results(self) -> list[Path]:
        """Every trial's result.json in the job, in name order."""
        return sorted(self.trials.glob("*/result.json"))
