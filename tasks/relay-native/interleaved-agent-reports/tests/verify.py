"""interleaved-agent-reports grader (SPEC-TASKS A.3, workflow): north 17, south 23, reserve
11, multiplier 3 -> (17 + 23 - 11) x 3 = 87, answered by the orchestrator in the thread.
reward = threaded_reply x answer_correct (87 is the last number in the answer)."""
import argparse, json, re

NUMBER = re.compile(r"(?<![A-Za-z0-9_])-?\d[\d,]*(?:\.\d+)?")


def grade(ev):
    roles = {v["pubkey"]: v["role"] for v in ev["identities"].values()}
    replies = [m for m in sorted(ev["messages"], key=lambda m: m["created_at"])
               if roles.get(m["pubkey"]) == "orchestrator" and m["reply_to_event_id"] == ev["task_event_id"]]
    scores = {"threaded_reply": float(bool(replies)), "answer_correct": 0.0}
    if replies:
        numbers = [float(n.replace(",", "")) for n in NUMBER.findall(replies[-1]["content"])]
        scores["answer_correct"] = float(bool(numbers) and numbers[-1] == 87.0)
    scores["reward"] = scores["threaded_reply"] * scores["answer_correct"]
    return scores


def main():
    p = argparse.ArgumentParser()
    for a in ("--evidence", "--reward", "--details"):
        p.add_argument(a, required=True)
    args = p.parse_args()
    try:
        scores, details = grade(json.load(open(args.evidence))), {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        scores, details = {"reward": 0.0}, {"error": "%s: %s" % (exc.__class__.__name__, exc)}
    json.dump(scores, open(args.reward, "w"))
    json.dump(details, open(args.details, "w"))


if __name__ == "__main__":
    main()
