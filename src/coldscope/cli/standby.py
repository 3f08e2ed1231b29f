"""``coldscope standby``: start, list and stop standby launchers (``coldscope.launch.standby``).

A launcher imports an engine command's modules once and waits; ``profile --standby NAME`` and
``compare --b-standby NAME`` then start that engine forked from it, without the imports.
"""

from __future__ import annotations

from pathlib import Path

import click

from coldscope.cli.common import console, echo, json_option, print_json

_DIR_OPTION = click.option("--dir", "root", default=".coldscope/standby", show_default=True,
                           type=click.Path(file_okay=False),
                           help="Where launchers keep their state, socket and log.")


@click.group()
def standby() -> None:
    """Keep an engine's modules imported, ready to fork a start-up.

    \b
    coldscope standby start tiny -- python -m vllm.entrypoints.openai.api_server --model DIR
    coldscope profile --standby tiny -- python -m vllm.entrypoints.openai.api_server --model DIR
    coldscope standby status
    coldscope standby stop tiny
    """


@standby.command("start", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--preload", "preload", multiple=True, metavar="MODULE",
              help="Also import this module ahead (repeatable), besides what the engine's "
                   "adapter lists.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds to wait for the imports.")
@_DIR_OPTION
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def start_cmd(name: str, preload: tuple[str, ...], timeout: float, root: str, as_json: bool,
              command: tuple[str, ...]) -> None:
    """Start launcher NAME for an engine COMMAND (after `--`): it imports what the engine's
    processes import, and returns once it is ready. The command's arguments are only used to
    know the engine and its interpreter; each start-up gives its own."""
    from coldscope.launch.standby import start
    launcher = start(name, list(command), root=Path(root), preload=preload, timeout=timeout)
    if as_json:
        print_json(launcher.as_dict())
        return
    failed = [i["module"] for i in launcher.imports if "error" in i]
    echo(f"standby {name}: ready (pid {launcher.pid}), {launcher.modules_loaded} modules "
         f"imported in {launcher.import_s:.1f} s"
         + (f"; not importable here: {', '.join(failed)}" if failed else ""))


@standby.command("status")
@click.argument("name", required=False)
@_DIR_OPTION
@json_option
def status_cmd(name: str | None, root: str, as_json: bool) -> None:
    """The launchers (or launcher NAME): state, imports, memory."""
    from coldscope.launch.standby import find, listing
    from coldscope.util.errors import ColdscopeError
    if name is not None:
        found = find(name, root=Path(root))
        if found is None:
            raise ColdscopeError(f"no standby named {name!r} in {root}")
        launchers = [found]
    else:
        launchers = listing(root=Path(root))
    docs = [s.as_dict() for s in launchers]
    if as_json:
        print_json({"standby": docs})
        return
    if not docs:
        echo(f"no standby launchers in {root}")
        return
    from coldscope.render.tables import standby_table
    out = console()
    out.print(standby_table(docs, out.width))


@standby.command("stop")
@click.argument("name")
@_DIR_OPTION
def stop_cmd(name: str, root: str) -> None:
    """Stop launcher NAME, and any engine it started that still runs."""
    from coldscope.launch.standby import stop
    stopped = stop(name, root=Path(root))
    echo(f"standby {name}: stopped (pid {stopped.pid})")
