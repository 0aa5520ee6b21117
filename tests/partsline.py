"""The parts line: which real parts this run of the suite exercised, and which it could not.

A test that needs a real part beside the engine says so with `@pytest.mark.part("NAME")`
(a test using the `runtime` fixture, or under tests/integration, tests/hostile or tests/ray,
needs the engine without saying so). When it passes, the part counts as run; when it is
skipped, the part is listed as not run with the skip's reason. The session ends with one
line of each, so "passed" never hides a part that did not run.

`make test` passes `--require-parts`: every part in PROMISED must then have run, or the
session fails (exit 1) naming what did not, unless the part is waived by name in
ORCHESTRA_TEST_WAIVE (comma-separated; README "Test parts" says when that is honest).
Parts in REPORTED depend on the host's network, not on what `make test` installs: they are
listed either way, never required, and a test that needs one skips with the reason
instead of passing on something it did not check.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROMISED = {
    "engine": "the Docker engine (dockerd)",
    "registry": "a private registry with authentication (Debian's docker-registry)",
    "registry-mirror": "the engine's registry mirror on 127.0.0.1:5678 (a Docker Hub name pulled through it)",
    "podman": "Podman's Docker-compatible socket as the engine",
    "ssh": "the engine reached over ssh://",
    "chromium": "headless Chromium (the viewer and report pages)",
    "gvisor": "gVisor (runsc) as the OCI runtime",
    "engine-restart": "dockerd stopped and restarted under a running job",
    "standin-bookworm": "the bookworm stand-in base",
    "standin-trixie": "the trixie stand-in base",
    "standin-bullseye": "the bullseye stand-in base",
    "ray": "a Ray cluster on loopback",
}
REPORTED = {
    "network-containers": "PyPI and Debian's mirror from inside containers",
    "network-host": "PyPI and npm from the host (installed agent CLIs)",
}
ENGINE_FOLDERS = ("integration", "hostile", "ray")

_ran: set[str] = set()
_skipped: dict[str, str] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--require-parts", action="store_true",
                     help="fail the session when a promised real part did not run (make test)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "part(name): the test exercises this real part "
                                       f"(one of {', '.join([*PROMISED, *REPORTED])})")


def _parts_of(item: pytest.Item) -> list[str]:
    names = [m.args[0] for m in item.iter_markers("part")]
    unknown = [n for n in names if n not in PROMISED and n not in REPORTED]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown part {unknown} (tests/partsline.py lists them)")
    in_engine_folder = Path(str(item.fspath)).parent.name in ENGINE_FOLDERS
    if "runtime" in getattr(item, "fixturenames", ()) or in_engine_folder:
        names.append("engine")
    return names


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    """The item's parts ride on its report (user_properties cross from an xdist worker to
    the controller, which keeps the tally; markers do not)."""
    outcome = yield
    parts = _parts_of(item)
    if parts:
        outcome.get_result().user_properties.append(("parts", parts))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    parts = next((v for k, v in report.user_properties if k == "parts"), [])
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        for part in parts:
            _skipped.setdefault(part, f"{report.nodeid}: {reason.removeprefix('Skipped: ')}")
    elif report.when == "call" and report.passed:
        _ran.update(parts)


def _missing() -> dict[str, str]:
    return {p: _skipped.get(p, "no test of it was collected") for p in PROMISED if p not in _ran}


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    ran = [p for p in [*PROMISED, *REPORTED] if p in _ran]
    not_run = {p: r for p, r in _skipped.items() if p not in _ran}
    write = terminalreporter.write_line
    write("parts run: " + (", ".join(ran) or "none"))
    if not_run:
        write("parts not run: " + "; ".join(f"{p} ({r})" for p, r in not_run.items()))
    if config.getoption("--require-parts"):
        waived = {w.strip() for w in os.environ.get("ORCHESTRA_TEST_WAIVE", "").split(",") if w.strip()}
        missing = {p: r for p, r in _missing().items() if p not in waived}
        if waived:
            write("parts waived (ORCHESTRA_TEST_WAIVE): " + ", ".join(sorted(waived)))
        if missing:
            write("FAILED: promised parts did not run: "
                  + "; ".join(f"{p} = {PROMISED[p]} ({r})" for p, r in missing.items()), red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller keeps the tally
        return
    if not session.config.getoption("--require-parts", default=False):
        return
    waived = {w.strip() for w in os.environ.get("ORCHESTRA_TEST_WAIVE", "").split(",") if w.strip()}
    if exitstatus == 0 and any(p not in waived for p in _missing()):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
