"""Strict unified-diff application for `mem patch` (stdlib only).

One file only; every hunk must apply exactly at its stated position (no fuzz, no
offsets); a diff that changes nothing is refused.
"""

import re

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    pass


def apply_unified_diff(original, diff):
    lines = diff.splitlines(keepends=True)
    headers = [i for i, line in enumerate(lines) if line.startswith("--- ")]
    if len(headers) > 1:
        raise PatchError("multi-file diffs are refused (one engram per patch)")
    body = lines[headers[0] + 2:] if headers else lines
    if headers and not (len(lines) > headers[0] + 1 and lines[headers[0] + 1].startswith("+++ ")):
        raise PatchError("a '--- ' header must be followed by '+++ '")
    source = original.splitlines(keepends=True)
    out, cursor, index, hunks = [], 0, 0, 0
    while index < len(body):
        match = HUNK.match(body[index])
        if not match:
            if body[index].strip():
                raise PatchError("expected a hunk header at diff line %d" % (index + 1))
            index += 1
            continue
        hunks += 1
        start = int(match.group(1))
        old_len = int(match.group(2)) if match.group(2) is not None else 1
        position = start - 1 if old_len else start
        if position < cursor:
            raise PatchError("hunk %d overlaps or is out of order" % hunks)
        out.extend(source[cursor:position])
        cursor = position
        index += 1
        consumed = 0
        while index < len(body) and not HUNK.match(body[index]):
            line = body[index]
            if line.startswith("\\"):
                if out and out[-1].endswith("\n"):
                    out[-1] = out[-1][:-1]
                index += 1
                continue
            tag, text = line[:1], line[1:]
            if tag in (" ", "-"):
                if cursor >= len(source) or source[cursor].rstrip("\n") != text.rstrip("\n"):
                    raise PatchError("hunk %d does not apply at line %d" % (hunks, cursor + 1))
                if tag == " ":
                    out.append(source[cursor])
                cursor += 1
                consumed += 1
            elif tag == "+":
                out.append(text if text.endswith("\n") else text + "\n")
            else:
                raise PatchError("bad diff line %d: %r" % (index + 1, line[:40]))
            index += 1
        if consumed != old_len:
            raise PatchError("hunk %d: header says %d old lines, body has %d" % (hunks, old_len, consumed))
    if not hunks:
        raise PatchError("no hunks found")
    out.extend(source[cursor:])
    result = "".join(out)
    if result == original:
        raise PatchError("the diff changes nothing (no-op refused)")
    return result
