"""cross-thread-requests grader (SPEC-TASKS A.3): the instruction (2 + 3) and the second,
scripted request (10 - 4) are each answered by the orchestrator in their own thread.
reward = first_answered x second_answered (each: the right number and not the other's)."""
import argparse, json, re

NUMBER = re.compile(r"(?<![A-Za-z0-9_])-?\d[\d,]*(?:\.\d+)?")


def answered(ev, roles, thread, right, wrong):
    replies = [m for m in sorted(ev["messages"], key=lambda m: m["created_at"])
               if roles.get(m["pubkey"]) == "orchestrator" and m["reply_to_event_id"] == thread]
    if not replies:
        return 0.0
    numbers = [float(n.replace(",", "")) for n in NUMBER.findall(replies[-1]["content"])]
    return float(right in numbers and wrong not in numbers)


def grade(ev):
    roles = {v["pubkey"]: v["role"] for v in ev["identities"].values()}
    second = ev["scripted_events"][0]
    scores = {"first_answered": answered(ev, roles, ev["task_event_id"], 5.0, 6.0),
              "second_answered": answered(ev, roles, second, 6.0, 5.0)}
    scores["reward"] = scores["first_answered"] * scores["second_answered"]
    return scores


def main():
    p = argparse.ArgumentParser()
    for a in ("--evidence", "--reward", "--details"):
        p.add_argument(a, required=True)
    args = p.parse_args()
    try:
        scores, details = grade(json.load(open(args.evidence))), {}
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        scores, details = {"reward": 0.0}, {"error": "%s: %s" % (exc.__class__.__name__, exc)}
    json.dump(scores, open(args.reward, "w"))
    json.dump(details, open(args.details, "w"))


if __name__ == "__main__":
    main()
