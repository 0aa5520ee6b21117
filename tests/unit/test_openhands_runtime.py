"""OpenHands' runtime install (agents.install._deb/_wrap): each wrapped Debian program runs
through the packages' own loader, found from the wrapper's own path, however it is called.
A fake loader (a script printing its arguments) stands in for glibc's; the real one runs
in tests/integration/test_openhands.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from orchestrator.agents.install import Recipe, _wrap, install_dir
from orchestrator.agents.openhands import RUNTIME, OpenHands

LOADER = "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"


def test_a_wrapped_program_runs_through_the_packages_loader_with_its_own_path_as_argv0(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / LOADER).parent.mkdir(parents=True)
    (root / LOADER).write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (root / LOADER).chmod(0o755)
    for name in ("tmux", "pydoc3.13"):
        (root / "usr/bin" / name).write_text("ELF")
    _wrap(Recipe("rt", "deb", "tmux", "trixie", wrap=(("usr/bin/tmux", "tmux"),)), root, {})
    # the ELF moved out of usr/bin, which now holds the wrapper only (it goes on the agent's PATH)
    assert (root / "usr/libexec/orchestra/tmux").read_text() == "ELF"
    assert sorted(p.name for p in (root / "usr/bin").iterdir()) == ["tmux"]
    for called in (root / "usr/bin/tmux", root / "usr/lib/../bin/tmux"):
        out = subprocess.run([str(called), "-V", "a b"], capture_output=True, text=True, check=True).stdout
        lib = f"{called.parent}/../../usr/lib/x86_64-linux-gnu"
        assert out.splitlines() == ["--library-path", lib, "--argv0", str(called),
                                    f"{called.parent}/../../usr/libexec/orchestra/tmux", "-V", "a b"]
        assert Path(lib).resolve() == (root / "usr/lib/x86_64-linux-gnu").resolve()


def test_openhands_compiles_with_the_runtimes_python_and_installs_apart_from_the_old_layout() -> None:
    assert OpenHands.recipe.interpreter is RUNTIME and RUNTIME.wrap[0] == ("usr/bin/python3.13", "orchestra-python3.13")
    assert ("usr/bin/tmux", "tmux") in RUNTIME.wrap and RUNTIME.version == "trixie"
    # the .pyc build lives in its own folder: an install made before it is not taken for it
    assert install_dir(OpenHands.recipe).name == "openhands-1.6.0+pyc"
    assert install_dir(RUNTIME).name == "openhands-runtime-trixie"
