"""Read the verifier's reward: reward.json (flat map of numbers) first, else reward.txt."""

from __future__ import annotations

import json
import math
from pathlib import Path

MAX_REWARD_FILE = 1024 * 1024


class RewardError(ValueError):
    """The verifier left no usable reward; the message says which file and why."""


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RewardError(f"{where}: {value!r} is not a number")
    if not math.isfinite(value):
        raise RewardError(f"{where}: {value!r} is not finite")
    return float(value)


def read_reward(verifier_dir: Path) -> dict[str, float]:
    json_path, txt_path = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    if json_path.is_file():
        if json_path.stat().st_size > MAX_REWARD_FILE:
            raise RewardError("reward.json: larger than 1 MB")
        try:
            data = json.loads(json_path.read_text(errors="replace"))
        except json.JSONDecodeError as exc:
            raise RewardError(f"reward.json: not JSON ({exc})") from exc
        if not isinstance(data, dict) or not data:
            raise RewardError("reward.json: expected a non-empty flat map of numbers")
        reward = {str(k): _number(v, f"reward.json: key {k!r}") for k, v in data.items()}
        if "reward" not in reward:
            if len(reward) != 1:
                raise RewardError("reward.json: no 'reward' key to use as the headline")
            reward["reward"] = next(iter(reward.values()))
        return reward
    if txt_path.is_file():
        text = txt_path.read_text(errors="replace")[:1000].strip()
        try:
            return {"reward": _number(float(text), "reward.txt")}
        except ValueError as exc:
            if isinstance(exc, RewardError):
                raise
            raise RewardError(f"reward.txt: {text[:80]!r} is not one number") from exc
    raise RewardError("the verifier wrote neither /logs/verifier/reward.json nor reward.txt")
