"""What every command shares: the Typer apps, the consoles, and the three helpers each
command uses (log set-up, the end of start-up, failing with a clear message)."""

from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from orchestrator.errors import InputError, OrchestraError

EXIT_CODES = ("Exit codes, one meaning each: 0 done (whatever the rewards); 1 a gate you asked for "
              "failed (--fail-on-regression, --fail-under); 2 bad input, named by file and field "
              "(nothing started, nothing written lost); 3 the engine or the host failed (Docker "
              "unreachable, the job folder's disk full); 4 an answer leak stopped the suite; 70 "
              "orchestra itself failed (a bug: a short message, the traceback in a file it names); "
              "130 cancelled (Ctrl-C, SIGTERM; results kept, `--resume` continues). A gate with "
              "nothing to compare (no task in common) is bad input, 2, never a pass.")


def one_paragraph(text: str) -> str:
    """Help text written over several source lines, as one paragraph (rich re-wraps it)."""
    return " ".join(text.split())


def _flag_shows_no_value() -> None:
    """A flag (--version, --retry-errors, --help...) takes no value, so --help shows none.
    typer's rich panels (on a terminal) print every option's type, a flag's as `<bool>`,
    as if it took one; click's plain help (piped) already shows none. A flag is any
    is_flag option that is not a count."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:  # click's Context
        return None if self.is_flag and not self.count else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flag_shows_no_value()
app = typer.Typer(add_completion=False, no_args_is_help=True, epilog=EXIT_CODES,
                  help="orchestra: run AI agents on tasks in containers and grade them. "
                       "Output that is data (--json -, --markdown -) goes to stdout alone; "
                       "tables and notes then go to stderr.")
tasks_app = typer.Typer(no_args_is_help=True, help="Inspect and validate tasks.")
images_app = typer.Typer(no_args_is_help=True, help="Manage task and base images.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(images_app, name="images")


def _unwrapped_console(stderr: bool = False) -> Console:
    """A console that wraps only on a terminal. Piped or redirected, rich would hard-wrap
    every line at 80 columns (or $COLUMNS): a CI log would show a path cut in two and a
    message no grep finds. Off a terminal each print is written whole, one line."""
    out = Console(stderr=stderr)
    out.soft_wrap = not out.is_terminal
    return out


console = _unwrapped_console()
err = _unwrapped_console(stderr=True)


def _version(value: bool) -> None:
    if value:
        import orchestrator

        typer.echo(f"orchestra {orchestrator.__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print orchestra's version and exit.")) -> None:
    """orchestra: run AI agents on tasks in containers and grade them."""


def human_console(*outputs: str | None) -> Console:
    """Where a command's tables and notes go: stdout, unless one of its data outputs is
    stdout ('-'), which then carries that data alone."""
    return err if "-" in outputs else console


_UNSHOWN = re.compile("[\x00-\x1f\x7f\u0085\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def _shown(cell: str) -> str:
    """A cell as a terminal shows it: a control, bidi or zero-width character (a name from
    a job folder made elsewhere) as its code point, [U+202E], never obeyed."""
    return _UNSHOWN.sub(lambda m: f"[U+{ord(m.group()):04X}]", cell)


def print_table(out: Console, title: str, header: list[str], rows: list[list[str]]) -> None:
    """A box-drawn table on a terminal; piped, plain aligned lines with nothing cut."""
    rows = [[_shown(cell) for cell in row] for row in rows]
    if out.is_terminal:
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for column in header:
            table.add_column(column)
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        out.print(table)
        return
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(len(header))]
    out.print(title, markup=False, highlight=False, soft_wrap=True)
    for line in [header, *rows]:
        out.print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip(),
                  markup=False, highlight=False, soft_wrap=True)


def imports_done() -> None:
    """Garbage collection back on (main() turns it off), with everything loaded so far
    frozen: the modules and models of start-up are never garbage, and scanning them cost a
    run ~0.1 s at start-up and ~0.14 s at exit (measured, 2-core machine)."""
    gc.freeze()
    gc.enable()


def configure_logs(verbose: bool = False, json_file: Path | None = None) -> None:
    from orchestrator import log  # structlog: imported by the commands that log, not by --help

    imports_done()
    log.configure(verbose, json_file)


def fail(exc: OrchestraError) -> None:
    from orchestrator.report import render_problems

    title = "bad input" if isinstance(exc, InputError) else "cannot run"
    render_problems(title, getattr(exc, "problems", None) or [str(exc)], err)
    raise typer.Exit(exc.exit_code)
