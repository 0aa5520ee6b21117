"""Engram slugs and values (DESIGN 3.5)."""

from __future__ import annotations

import re

SLUG = re.compile(r"^mem/[a-z0-9][a-z0-9_-]{0,63}(/[a-z0-9][a-z0-9_-]{0,63})*$")
MAX_SLUG_BYTES = 255
MAX_VALUE_BYTES = 65_535
RESERVED = {"mem/core"}


class SlugError(ValueError):
    pass


def normalise(raw: str) -> str:
    """' Foo/Bar ' -> 'mem/foo/bar'; raise SlugError when it breaks the grammar."""
    slug = raw.strip().lower()
    if not slug.startswith("mem/"):
        slug = "mem/" + slug
    if len(slug.encode()) > MAX_SLUG_BYTES:
        raise SlugError(f"slug {raw!r}: longer than {MAX_SLUG_BYTES} bytes")
    if not SLUG.match(slug):
        raise SlugError(f"slug {raw!r}: must match {SLUG.pattern}")
    if slug in RESERVED:
        raise SlugError(f"slug {raw!r}: 'core' is reserved")
    return slug
