"""multiline-message grader (SPEC-TASKS A.3): the orchestrator's threaded reply holds real
newlines (each primary color of light on its own line) and no literal backslash-n.
reward = threaded_reply x real_newlines x answer_correct."""
import argparse, json

COLORS = ("red", "green", "blue")


def grade(ev):
    roles = {v["pubkey"]: v["role"] for v in ev["identities"].values()}
    replies = [m for m in sorted(ev["messages"], key=lambda m: m["created_at"])
               if roles.get(m["pubkey"]) == "orchestrator" and m["reply_to_event_id"] == ev["task_event_id"]]
    scores = {"threaded_reply": float(bool(replies)), "real_newlines": 0.0, "answer_correct": 0.0}
    if replies:
        text = replies[-1]["content"]
        lines = [line.strip().lower() for line in text.split("\n") if line.strip()]
        scores["real_newlines"] = float("\\n" not in text and len(lines) >= 3)
        scores["answer_correct"] = float(all(any(c in line for line in lines) for c in COLORS)
                                         and all(sum(c in line for c in COLORS) <= 1 for line in lines))
    scores["reward"] = scores["threaded_reply"] * scores["real_newlines"] * scores["answer_correct"]
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
