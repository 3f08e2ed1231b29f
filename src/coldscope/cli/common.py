"""Options and printing shared by the commands."""

from __future__ import annotations

import sys

import click

from coldscope.errors import ColdscopeError
from coldscope.safeio import dumps_json

store_option = click.option(
    "--store", "store_path", type=click.Path(dir_okay=False), default=None,
    help="Run store (SQLite file). Default: $COLDSCOPE_STORE or ./.coldscope/store.db",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for tools.")


def print_json(obj) -> None:
    """Always valid JSON: a non-finite number (a prediction that overflowed) prints as null."""
    sys.stdout.write(dumps_json(obj) + "\n")


def console():
    """A rich console; when output is not a terminal, 120 columns rather than rich's 80."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=120)


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise ColdscopeError(f"--env takes KEY=VALUE, got {p!r}")
        k, v = p.split("=", 1)
        out[k] = v
    return out
