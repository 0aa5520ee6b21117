"""reply-to-thread grader (SPEC-TASKS A.2). Reads only relay-evidence.json; exits 0.

The answer is the last non-user message after the instruction. Dimensions:
expected_author (the orchestrator wrote it), same_channel, reply_to_thread (a reply to
the instruction), answer_correct (each figure within +-1, on a line naming its label).
reward = product.
"""

import argparse
import json
import re

FIGURES = {"profit": 9800.0, "average": 37450.0 / 3}
NUMBER = re.compile(r"(?<![A-Za-z0-9_])-?\d[\d,]*(?:\.\d+)?")


def figure_ok(text, label, expected):
    for line in text.split("\n"):
        if label in line.lower():
            if any(abs(float(n.replace(",", "")) - expected) <= 1 for n in NUMBER.findall(line)):
                return True
    return False


def grade(evidence):
    trial, identities = evidence["trial"], evidence["identities"]
    channel, task_event = trial["channel_id"], evidence["task_event_id"]
    roles = {v["pubkey"]: v["role"] for v in identities.values()}
    messages = sorted(evidence["messages"], key=lambda m: m["created_at"])
    question = next(m for m in messages if m["id"] == task_event)
    later = [m for m in messages if m["created_at"] >= question["created_at"]
             and roles.get(m["pubkey"]) not in ("user", "actor") and m["id"] != task_event]
    scores = dict.fromkeys(("expected_author", "same_channel", "reply_to_thread", "answer_correct"), 0.0)
    details = {"question_id": task_event, "answer_id": None, "answer_text": None}
    if later:
        answer = later[-1]
        details.update(answer_id=answer["id"], answer_text=answer["content"])
        scores["expected_author"] = float(roles.get(answer["pubkey"]) == "orchestrator")
        scores["same_channel"] = float(answer["channel_id"] == channel)
        scores["reply_to_thread"] = float(answer["reply_to_event_id"] == task_event)
        checks = {label: figure_ok(answer["content"], label, value) for label, value in FIGURES.items()}
        details["figures"] = checks
        scores["answer_correct"] = float(all(checks.values()))
    reward = 1.0
    for value in scores.values():
        reward *= value
    scores["reward"] = reward
    return scores, details


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--evidence", required=True)
    parser.add_argument("--reward", required=True)
    parser.add_argument("--details", required=True)
    args = parser.parse_args()
    try:
        with open(args.evidence) as handle:
            scores, details = grade(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        scores = {"reward": 0.0}
        details = {"error": "%s: %s" % (exc.__class__.__name__, exc)}
    with open(args.reward, "w") as handle:
        json.dump(scores, handle)
    with open(args.details, "w") as handle:
        json.dump(details, handle, indent=2)


if __name__ == "__main__":
    main()
