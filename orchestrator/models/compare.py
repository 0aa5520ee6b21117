"""The paired comparison of two jobs (`orchestra compare`, report/compare.py), as written
to compare*.json and read back by `orchestra report` and the viewer."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.models.records import ArmShadow


class ClassDelta(BaseModel):
    """One scenario class: paired trials, pass rates on and off, their difference."""

    n: int
    on: float
    off: float
    delta_pp: float


class KStats(BaseModel):
    """One arm over k attempts a task."""

    pass_hat_k: float
    pass_at_k: float
    mean_pass_at_1: float
    flaky: list[str] = Field(default_factory=list)


class CompareReport(BaseModel):
    model_config = ConfigDict(extra="allow")  # a later orchestra's keys are kept
    on_job: str
    off_job: str
    arms_differ_in: list[str] = Field(default_factory=list)  # policy, condition
    paired: int
    unpaired: list[str] = Field(default_factory=list)  # task#attempt
    unpaired_reasons: dict[str, str] = Field(default_factory=dict)
    void_pairs_excluded: list[str] = Field(default_factory=list)  # answer leaks: no honest outcome
    on_pass_rate: float
    off_pass_rate: float
    utility_delta_pp: float
    helpful: list[str] = Field(default_factory=list)  # on passed, off failed
    harmful: list[str] = Field(default_factory=list)  # on failed, off passed, recall fired
    harmful_without_recall: list[str] = Field(default_factory=list)
    avg_injected_chars: float = 0.0
    p_value: float  # exact McNemar over the discordant pairs
    ci95: list[float]  # bootstrap, percentage points
    per_class: dict[str, ClassDelta] = Field(default_factory=dict)
    k: dict[str, KStats] | None = None  # "on", "off": when either arm ran k > 1
    memory_shadow: dict[str, ArmShadow | None] | None = None  # arm (on, off) -> its shadow

    @property
    def harmed(self) -> int:
        return len(self.harmful) + len(self.harmful_without_recall)
