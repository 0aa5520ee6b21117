"""The verifier's own interpreter: static tools from the host, mounted read-only.

In `shared` and `snapshot` modes test.sh runs on the filesystem the agent left behind, so
an agent that replaced /bin/bash, /bin/sh or `timeout` would grade itself. Where the host
has a static bash and a static busybox (Debian: `bash-static`, `busybox-static`; the
README's set-up installs them), both are bind-mounted read-only at TOOLS_DIR and the
verifier's wrapper and test.sh run under them: the agent can change neither. What test.sh
itself calls (python3, pytest, curl) still comes from the agent's filesystem, so these
modes stay `verifier_forgeable`; `separate` is the mode that keeps the agent off the grade.
Without the host tools the image's own `sh` and `bash` are used, and the result says so.
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path

TOOLS_DIR = "/opt/orchestra-verifier"
_CANDIDATES = {"bash": ("/bin/bash-static", "/usr/bin/bash-static"),
               "busybox": ("/bin/busybox", "/usr/bin/busybox")}
PT_INTERP = 3


def _is_static_elf(path: Path) -> bool:
    """An ELF executable with no program interpreter (so it needs nothing from the image)."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
                return False
            endian = "<" if head[5] == 1 else ">"
            phoff, = struct.unpack_from(endian + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(endian + "HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    return all(struct.unpack_from(endian + "I", table, i * phentsize)[0] != PT_INTERP
               for i in range(phnum))


@functools.cache
def host_tools() -> dict[str, str]:
    """Host path -> container path of the static tools; empty when either is missing."""
    found = {}
    for name, candidates in _CANDIDATES.items():
        path = next((Path(p) for p in candidates if _is_static_elf(Path(p))), None)
        if path is None:
            return {}
        found[str(path)] = f"{TOOLS_DIR}/{name}"
    return found


def interpreter_note(static: bool) -> str:
    return ("static bash + busybox from the host, read-only" if static
            else "the image's own sh and bash (no static tools on the host: install bash-static "
                 "and busybox-static)")


def wrapper(static: bool) -> tuple[list[str], str, str]:
    """(shell argv prefix, the utility prefix, the bash that runs test.sh)."""
    if static:
        return [f"{TOOLS_DIR}/bash", "-c"], f"{TOOLS_DIR}/busybox ", f"{TOOLS_DIR}/bash"
    return ["sh", "-c"], "", "bash"
