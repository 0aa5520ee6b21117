"""user-mention grader (SPEC-TASKS A.3): the orchestrator's threaded reply mentions the
requesting user by pubkey and says 42. reward = threaded_reply x mentions_user x answer_correct."""
import argparse, json, re

NUMBER = re.compile(r"(?<![A-Za-z0-9_])-?\d[\d,]*(?:\.\d+)?")


def grade(ev):
    roles = {v["pubkey"]: v["role"] for v in ev["identities"].values()}
    user = next(v["pubkey"] for v in ev["identities"].values() if v["role"] == "user")
    replies = [m for m in sorted(ev["messages"], key=lambda m: m["created_at"])
               if roles.get(m["pubkey"]) == "orchestrator" and m["reply_to_event_id"] == ev["task_event_id"]]
    scores = {"threaded_reply": float(bool(replies)), "mentions_user": 0.0, "answer_correct": 0.0}
    if replies:
        answer = replies[-1]
        scores["mentions_user"] = float(user in answer["mentioned_pubkeys"])
        numbers = [float(n.replace(",", "")) for n in NUMBER.findall(answer["content"])]
        scores["answer_correct"] = float(42.0 in numbers)
    scores["reward"] = scores["threaded_reply"] * scores["mentions_user"] * scores["answer_correct"]
    return scores


def main():
    p = argparse.ArgumentParser()
    for a in ("--evidence", "--reward", "--details"):
        p.add_argument(a, required=True)
    args = p.parse_args()
    try:
        scores, details = grade(json.load(open(args.evidence))), {}
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        scores, details = {"reward": 0.0}, {"error": "%s: %s" % (exc.__class__.__name__, exc)}
    json.dump(scores, open(args.reward, "w"))
    json.dump(details, open(args.details, "w"))


if __name__ == "__main__":
    main()
