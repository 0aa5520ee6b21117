"""Every HTML page orchestra writes or serves (report.html, `orchestra view`'s pages) is a
Jinja2 template of its package's `templates/` folder, rendered here with autoescape on.

What a template prints goes through two steps, whatever the template says: `finalize`
shows it (None as nothing, bidirectional controls such as U+202E as `[U+202E]`, so no text
displays reversed), then autoescape HTML-escapes it. A template shows a name (a file an
agent made) with the `visible` filter: every control character as its escape too. Links
are built by `href`, one percent-encoded segment at a time, and queries by `q`; both are
template globals. Nothing is marked safe here: a value that is Markup already passes
through, and only our code makes one (`view.pages.page`'s body, commented there).

Jinja2 is imported on the first render, not with this module: `orchestra run` renders no
page, and its start-up time is measured.
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
CONTROL = re.compile("[\x00-\x1f\x7f]")


def _code_point(match: re.Match[str]) -> str:
    return f"[U+{ord(match.group()):04X}]"


def shown(value: object) -> str:
    """A value as a page shows it, before escaping: None as nothing, bidi controls visible."""
    text = "" if value is None else str(value)
    return text if text.isascii() else BIDI.sub(_code_point, text)  # ASCII: no bidi control


def esc(value: object) -> str:
    """A value as HTML outside a template (server.py's error page, tests): shown, then
    escaped as autoescape escapes it (MarkupSafe), so `esc(x)` is what a page prints of x."""
    from markupsafe import escape

    return str(escape(shown(value)))


def visible(text: object) -> str:
    """Every control character (a newline too) as its escape: `\\n`, `\\x1b`."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def href(*segments: object) -> str:
    """An absolute path from raw segments, each percent-encoded whole ('/' included)."""
    return "/" + "/".join(urllib.parse.quote(str(seg), safe="") for seg in segments)


def q(**params: object) -> str:
    """A query string of the parameters that have a value."""
    return "?" + urllib.parse.urlencode({k: v for k, v in params.items() if v not in (None, "")})


@functools.cache
def environment(package: str) -> jinja2.Environment:
    """The environment of one package's templates (made once; Jinja2 caches compiled ones)."""
    import jinja2
    import markupsafe

    def finalize(value: object) -> object:
        return value if isinstance(value, markupsafe.Markup) else shown(value)

    env = jinja2.Environment(loader=jinja2.PackageLoader(package, "templates"), autoescape=True,
                             finalize=finalize, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["visible"] = visible
    env.globals.update(href=href, q=q)
    return env


def render(package: str, template: str, /, **context: Any) -> str:
    """One template of `package`'s templates/ folder, filled in."""
    return environment(package).get_template(template).render(**context)
