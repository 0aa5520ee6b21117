"""File memory for agents (stdlib only): load fact files from the state root, recall the
best matches for a query (BM25 with CJK bigrams), pinned facts, and project-over-global
overrides by subject_key.

Layout (DESIGN 3.1, SPEC-TASKS B): $ORCHESTRA_STATE_HOME/projects/<workspace-slug>/memory/*.md
and $ORCHESTRA_STATE_HOME/memory/global/*.md, each with YAML frontmatter.
"""

import math
import os
import re

WORD = re.compile(r"[a-z0-9][a-z0-9_.-]*|[\u3400-\u9fff]")


def workspace_slug(workdir):
    return workdir.rstrip("/").replace("/", "-") or "-"


def parse_frontmatter(text):
    """A small YAML subset: `key: value`, `key: [a, b]`, one nested level (metadata:)."""
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        return {}, text
    head, body = text[3:end], text[end + 4:]
    data, parent = {}, None
    for line in head.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = [v.strip().strip("'\"") for v in value[1:-1].split(",") if v.strip()]
        elif isinstance(value, str):
            value = value.strip("'\"")
        if indent and parent is not None:
            data[parent][key] = value
        elif value == "":
            data[key], parent = {}, key
        else:
            data[key], parent = value, None
    return data, body.strip()


def load_facts(state_home=None, workdir="/app"):
    state_home = state_home or os.environ.get("ORCHESTRA_STATE_HOME", "")
    if not state_home:
        return []
    folders = [("project", os.path.join(state_home, "projects", workspace_slug(workdir), "memory")),
               ("global", os.path.join(state_home, "memory", "global"))]
    facts = []
    for scope, folder in folders:
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith(".md"):
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    meta, body = parse_frontmatter(handle.read())
                facts.append({"id": meta.get("name") or name[:-3], "scope": scope, "meta": meta,
                              "body": body})
    # A project fact overrides a global one with the same subject_key.
    project_keys = {f["meta"].get("subject_key") for f in facts if f["scope"] == "project"}
    return [f for f in facts if not (f["scope"] == "global" and f["meta"].get("subject_key")
                                     and f["meta"].get("subject_key") in project_keys)]


def tokens(text):
    words = WORD.findall(text.lower())
    cjk = [w for w in words if len(w) == 1 and "\u3400" <= w <= "\u9fff"]
    return words + [a + b for a, b in zip(cjk, cjk[1:])]


def fact_text(fact):
    meta = fact["meta"]
    keywords = meta.get("keywords") or []
    return " ".join([fact["id"], str(meta.get("description", "")), " ".join(keywords), fact["body"]])


def recall(query, facts, k=3, max_chars=4000):
    """(hits, suppressed): the top-k facts by BM25 with a positive score, within max_chars."""
    docs = [tokens(fact_text(f)) for f in facts]
    if not docs:
        return [], 0
    avg = sum(len(d) for d in docs) / len(docs)
    terms = set(tokens(query))
    scored = []
    for fact, doc in zip(facts, docs):
        score = 0.0
        for term in terms:
            tf = doc.count(term)
            if not tf:
                continue
            df = sum(1 for d in docs if term in d)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(doc) / avg))
        if score > 0:
            scored.append((score, fact))
    scored.sort(key=lambda pair: -pair[0])
    hits, used, suppressed = [], 0, 0
    for _score, fact in scored[:k]:
        size = len(fact["body"])
        if used + size > max_chars:
            suppressed += 1
            continue
        hits.append(fact)
        used += size
    suppressed += max(0, len(scored) - k)
    return hits, suppressed


SHADOW_RETRIEVER = "trigram-cosine-v2"


def shadow_top1(query, facts):
    """The V2 shadow retriever: character-trigram cosine over the same fact texts, scored
    independently of BM25's word tokens. Its top-1 id (None when nothing scores) is recorded
    beside the primary's, never used: the report's top-1 agreement rate compares the two."""
    def grams(text):
        flat = " ".join(text.lower().split())
        counts = {}
        for i in range(len(flat) - 2):
            counts[flat[i:i + 3]] = counts.get(flat[i:i + 3], 0) + 1
        return counts

    wanted = grams(query)
    norm = math.sqrt(sum(v * v for v in wanted.values()))
    best, best_score = None, 0.0
    for fact in facts:
        have = grams(fact_text(fact))
        size = math.sqrt(sum(v * v for v in have.values()))
        if not norm or not size:
            continue
        score = sum(v * have.get(g, 0) for g, v in wanted.items()) / (norm * size)
        if score > best_score:
            best, best_score = fact["id"], score
    return best


def pinned(facts):
    return [f for f in facts if f["meta"].get("activation") == "pinned"]


def render(facts):
    return "\n".join("[%s] %s" % (f["id"], f["body"]) for f in facts)
