"""Commands ``tune`` (find and prove the fastest start-up of an engine command) and ``bundle``
(pack the caches a configuration relies on)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from coldscope.cli.common import (
    console,
    echo,
    json_option,
    parse_env,
    print_json,
    show,
    store_option,
)
from coldscope.tuning.session import DEFAULT_BUDGET, DEFAULT_TIMEOUT_S
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.tuning.search import Measurement, TrialRequest
    from coldscope.tuning.tune import TuneSession


def parse_fraction(text: str | None) -> float | None:
    """``10%`` or ``0.1`` -> 0.1; None stays None."""
    if text is None:
        return None
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ColdscopeError(f"--max-throughput-loss takes a share like 10% or 0.1, got {text!r}")\
            from None
    if not 0 <= value < 1:
        raise ColdscopeError(f"--max-throughput-loss must be between 0% and 100%, got {text!r}")
    return value


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--budget", default=DEFAULT_BUDGET, show_default=True, type=click.IntRange(2),
              help="Engine start-ups to spend in all: the cold and warm baselines, primes, "
                   "trials, repeats and the confirmation start-ups.")
@click.option("--max-throughput-loss", "max_loss", default=None, metavar="SHARE",
              help="Keep only changes whose serving throughput is shown (the low end of its 95 % "
                   "interval) to lose at most this much (e.g. 10%).")
@click.option("--allow-output-change", is_flag=True,
              help="Accept changes whose greedy output differs from the default's (rejected "
                   "otherwise); the result says so.")
@click.option("--timeout", default=DEFAULT_TIMEOUT_S, show_default=True,
              type=click.FloatRange(min=1),
              help="Seconds from launch to ready before a start-up is failed.")
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE",
              help="Extra environment for the engine (repeatable).")
@click.option("--bundle", "bundle_file", default=None, type=click.Path(dir_okay=False),
              help="Seed the bundle's configuration from this cache bundle (`coldscope bundle`).")
@click.option("--resume", is_flag=True, help="Finish an interrupted session (the newest, or "
              "--session).")
@click.option("--session", default=None, help="Session id to resume.")
@click.option("--engine-python", default=None,
              help="Interpreter whose engine to read the catalogue from (default: the command's "
                   "`python`, i.e. this one).")
@click.option("--cold-evict/--no-cold-evict", default=True, show_default=True,
              help="Before each start-up on empty caches, evict the model's and the engine's "
                   "Python files from the page cache, as on a new node (--no-cold-evict: only "
                   "the engine caches are empty, on a warm machine; the result says which).")
@click.option("--quiet", is_flag=True, help="Do not echo the engine's output.")
@store_option
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def tune(budget: int, max_loss: str | None, allow_output_change: bool, timeout: float,
         env_pairs: tuple[str, ...], bundle_file: str | None, resume: bool, session: str | None,
         engine_python: str | None, cold_evict: bool, quiet: bool, store_path: str | None,
         as_json: bool, command: tuple[str, ...]) -> None:
    """Find the fastest start-up of an engine COMMAND (after `--`) on this machine, and prove it:

    coldscope tune --budget 16 -- python -m vllm.entrypoints.openai.api_server --model DIR
    """
    from coldscope.api import tune as run_tune
    from coldscope.cli.progress import StartupProgress, wanted
    from coldscope.render.tune import session_banner, startup_line
    from coldscope.store.db import default_store_path
    if resume and command:
        raise ColdscopeError("--resume takes no COMMAND: the session has its own")
    if not resume and not command:
        raise ColdscopeError("give the engine command after `--` (or --resume)")
    show_line = None if (quiet or as_json) else (lambda line: echo(f"  │ {line}", err=True))
    # On a terminal: the running start-up's elapsed time and the stage it is in now (drawn
    # from the first launch on; its count of start-ups is the session's budget).
    live = StartupProgress(wanted(as_json))
    opened: list[TuneSession] = []

    def on_open(session: TuneSession) -> None:
        opened.append(session)
        if session.reaped_run and not as_json:
            echo(f"stopped the engine of the interrupted start-up {session.reaped_run}",
                 err=True)
        if session.reaped_launcher is not None and not as_json:
            echo(f"stopped the standby launcher the interrupted session left (pid "
                 f"{session.reaped_launcher})", err=True)
        if not as_json:
            console().print(session_banner(session.spec))
        live.runs = session.spec.budget

    def progress(req: TrialRequest, m: Measurement, replayed: bool) -> None:
        live.done()
        if not as_json:
            echo(startup_line(req, m, replayed, live.runs), err=True)

    try:
        with live:
            result = run_tune(
                command, store_path or default_store_path(),
                resume=(session or True) if resume else False,
                # a resumed session has its own options: the ones given are not read
                env=None if resume else parse_env(env_pairs), budget=budget,
                max_throughput_loss=None if resume else parse_fraction(max_loss),
                allow_output_change=allow_output_change, timeout=timeout,
                bundle=bundle_file, engine_python=engine_python, cold_evict=cold_evict,
                on_open=on_open, on_line=show_line, on_start=live.launched,
                on_stage=live.stage, on_measured=progress)
    except KeyboardInterrupt:
        if opened:
            echo(f"interrupted; finish with `coldscope tune --resume --session "
                 f"{opened[0].spec.id}`", err=True)
        raise
    if as_json:
        print_json(result.to_json())
    else:
        show(result)


@click.command()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The bundle file to write (.tar.gz).")
@click.option("--tune", "tune_session", default=None, metavar="SESSION",
              help="Pack the caches of this tune session's winner (default: the newest session).")
@click.option("--config", "cache_key", default=None,
              help="Pack this configuration of the session instead of the winner (a cache key "
                   "like aot_compile_off+multiprocessing_off, or `default`).")
@store_option
@json_option
def bundle(output: str, tune_session: str | None, cache_key: str | None,
           store_path: str | None, as_json: bool) -> None:
    """Pack the caches a tuned configuration relies on, with a manifest (engine, torch and
    Python versions, model hash, machine), for `profile --bundle` / `tune --bundle`."""
    from coldscope.store.db import default_store_path
    from coldscope.tuning import session as ts
    from coldscope.tuning.bundle import pack_session
    from coldscope.util.safeio import check_output_target, writes_to_stdout
    check_output_target(output)  # before the work: never a device node, FIFO or directory
    store_file = Path(store_path) if store_path else default_store_path()
    directory = ts.find_session(store_file, tune_session)
    manifest = pack_session(directory, Path(output), cache_key=cache_key)
    said = writes_to_stdout(output)  # the bundle is on stdout: what was written, on stderr
    if as_json:
        print_json({"output": output, "manifest": manifest}, err=said)
    else:
        echo(f"wrote {output}: caches of {manifest['config']['cache_key']} for "
             f"{manifest['engine']['name']} {manifest['engine']['version']} "
             f"(torch {manifest['engine']['torch']}), "
             f"model {manifest['model']['name']} "
             f"({(manifest['model']['sha256'] or 'not hashed')[:12]}), "
             f"{manifest['size_bytes'] / 1e6:.1f} MB", err=said)
        echo("use it: coldscope profile --bundle " + shlex.quote(output) + " -- COMMAND",
             err=said)
