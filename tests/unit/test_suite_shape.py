"""The suite itself: what makes `make test` depend on the machine or stop at collection."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_modules_share_a_name():
    """pytest imports test modules by basename (no packages here): two of one name in two
    folders stop the whole run at collection (a clean clone did, once)."""
    names: dict[str, list[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


def test_no_test_sets_columns():
    """Output off a terminal is never wrapped, so no test needs a terminal width."""
    setting = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py")
               if p.name != Path(__file__).name
               and any(f in p.read_text() for f in ('"COLUMNS":', 'setenv("COLUMNS"', "COLUMNS="))]
    assert setting == []
