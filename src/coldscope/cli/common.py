"""Options and printing shared by the commands."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import clean_text, dumps_json

if TYPE_CHECKING:
    from coldscope.util.terminal import SafeConsole

store_option = click.option(
    "--store", "store_path", type=click.Path(dir_okay=False), default=None,
    help="Run store (SQLite file). Default: $COLDSCOPE_STORE or ./.coldscope/store.db",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for tools.")


def print_json(obj: Any, err: bool = False) -> None:
    """Always valid JSON: a non-finite number (a prediction that overflowed) prints as null.
    ``err``: on stderr (a command whose ``-o`` is stdout says what it wrote there)."""
    (sys.stderr if err else sys.stdout).write(dumps_json(obj) + "\n")


def console(stderr: bool = False) -> SafeConsole:
    """The rich console of every command (``coldscope.util.terminal.SafeConsole``: no markup,
    control sequences or links from data); when output is not a terminal, the width
    ``COLUMNS`` says (``COLUMNS=80 coldscope runs | less``), else 120 columns rather than 80."""
    import os

    from coldscope.util.terminal import SafeConsole
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return SafeConsole(stderr=stderr)  # rich reads the terminal's width, or COLUMNS
    return SafeConsole(stderr=stderr, width=120)


def show(record: object) -> None:
    """Print ``record`` as ``coldscope.render.render`` draws it, on the command's console.
    Not cropped at the console's width: what a renderer keeps whole (``render.verbatim``, lines
    of figures) stays whole on a narrow terminal or a pipe; tables fit the width anyway."""
    from coldscope.render import render
    console().print(render(record), crop=False)


def echo(message: object = "", err: bool = False) -> None:
    """``click.echo`` of text that may hold data from logs and stores: control sequences (a
    window title, a hidden hyperlink, colours) are removed first, for a terminal or a pipe."""
    click.echo(clean_text(str(message)), err=err)


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise ColdscopeError(f"--env takes KEY=VALUE, got {p!r}")
        k, v = p.split("=", 1)
        out[k] = v
    return out
