"""`orchestra view`: a local web server (server: 127.0.0.1, Host checked) over written
results: the job pages (pages), one trial (trial), the paired comparison (compare_page)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.view.server import ViewServer

__all__ = ["ViewServer"]
__getattr__, __dir__ = public_face(__name__, {
    "ViewServer": "server",
})
