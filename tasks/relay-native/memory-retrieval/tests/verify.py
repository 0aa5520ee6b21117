"""memory-retrieval grader (SPEC-TASKS A.1). Reads only relay-evidence.json; exits 0.

reward = answer_correct x threaded_reply x evidence_complete, where the answer is the last
message by the single orchestrator in the trial channel that replies to the task event.
"""

import argparse
import json
import re

TASK_NAME = "memory-retrieval"
EXPECTED = 352345.0
ALLOWED = [2024.0, 352345.0]
DISTRACTORS = [361250.0, 351340.0, 2400.0, 325401.0, 3710.0, 21604.0]
NUMBER = re.compile(r"(?<![A-Za-z0-9_])-?\d[\d,]*(?:\.\d+)?")


def parse_numbers(text):
    return [float(m.replace(",", "")) for m in NUMBER.findall(text)]


def grade(evidence):
    details = {"question_id": None, "answer_id": None, "answer_text": None,
               "parsed_numbers": [], "mentions_expected": False, "mentions_distractor": False,
               "noise_numbers": [], "allowed_numbers": sorted(ALLOWED),
               "distractor_numbers": sorted(DISTRACTORS)}
    scores = {"answer_correct": 0.0, "threaded_reply": 0.0, "evidence_complete": 0.0}
    if not isinstance(evidence, dict):
        raise ValueError("evidence is not a JSON object")
    identities = evidence.get("identities")
    messages = evidence.get("messages")
    trial = evidence.get("trial")
    if not isinstance(identities, dict) or not isinstance(messages, list) or not isinstance(trial, dict):
        raise ValueError("evidence lacks identities, messages or trial")
    leads = [v for v in identities.values() if isinstance(v, dict) and v.get("role") == "orchestrator"]
    task_event_id = evidence.get("task_event_id")
    channel_id = trial.get("channel_id")
    details["question_id"] = task_event_id
    complete = (evidence.get("schema_version") == 1 and evidence.get("task_name") == TASK_NAME
                and evidence.get("truncated") is False and len(leads) == 1
                and isinstance(task_event_id, str) and isinstance(channel_id, str))
    scores["evidence_complete"] = float(complete)
    if len(leads) == 1:
        pubkey = leads[0].get("pubkey")
        replies = [m for m in messages if isinstance(m, dict) and m.get("pubkey") == pubkey
                   and m.get("channel_id") == channel_id and task_event_id is not None
                   and m.get("reply_to_event_id") == task_event_id
                   and isinstance(m.get("content"), str)]
        replies.sort(key=lambda m: (m.get("created_at") or 0))
        if replies:
            answer = replies[-1]
            numbers = parse_numbers(answer["content"])
            details.update(answer_id=answer.get("id"), answer_text=answer["content"],
                           parsed_numbers=numbers,
                           mentions_expected=EXPECTED in numbers,
                           mentions_distractor=any(n in DISTRACTORS for n in numbers),
                           noise_numbers=[n for n in numbers if n not in ALLOWED and n not in DISTRACTORS])
            scores["threaded_reply"] = 1.0
            scores["answer_correct"] = float(EXPECTED in numbers and all(n in ALLOWED for n in numbers))
    scores["reward"] = scores["answer_correct"] * scores["threaded_reply"] * scores["evidence_complete"]
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
    except (OSError, ValueError) as exc:
        scores = {"reward": 0.0, "answer_correct": 0.0, "threaded_reply": 0.0, "evidence_complete": 0.0}
        details = {"error": "%s: %s" % (exc.__class__.__name__, exc)}
    with open(args.reward, "w") as handle:
        json.dump(scores, handle)
    with open(args.details, "w") as handle:
        json.dump(details, handle, indent=2)


if __name__ == "__main__":
    main()
