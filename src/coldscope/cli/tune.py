"""Commands ``tune`` (find and prove the fastest start-up of an engine command) and ``bundle``
(pack the caches a configuration relies on)."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from coldscope.cli.common import console, echo, json_option, parse_env, print_json, store_option
from coldscope.util.errors import ColdscopeError


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
@click.option("--budget", default=16, show_default=True, type=click.IntRange(2),
              help="Engine start-ups to spend in all: the cold and warm baselines, primes, "
                   "trials, repeats and the confirmation start-ups.")
@click.option("--max-throughput-loss", "max_loss", default=None, metavar="SHARE",
              help="Keep only changes whose serving throughput is shown (the low end of its 95 % "
                   "interval) to lose at most this much (e.g. 10%).")
@click.option("--allow-output-change", is_flag=True,
              help="Accept changes whose greedy output differs from the default's (rejected "
                   "otherwise); the result says so.")
@click.option("--timeout", default=900.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds from launch to ready before a start-up is failed.")
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE",
              help="Extra environment for the engine (repeatable).")
@click.option("--bundle", "bundle_file", default=None, type=click.Path(dir_okay=False),
              help="Seed the bundle's configuration from this cache bundle (`coldscope bundle`).")
@click.option("--resume", is_flag=True, help="Finish an interrupted session (the newest, or "
              "--session).")
@click.option("--session", default=None, help="Session id to resume.")
@click.option("--engine-python", default=None,
              help="Interpreter whose vLLM to read the catalogue from (default: the command's "
                   "`python`, i.e. this one).")
@click.option("--quiet", is_flag=True, help="Do not echo the engine's output.")
@store_option
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def tune(budget, max_loss, allow_output_change, timeout, env_pairs, bundle_file, resume,
         session, engine_python, quiet, store_path, as_json, command):
    """Find the fastest start-up of an engine COMMAND (after `--`) on this machine, and prove it:

    coldscope tune --budget 16 -- python -m vllm.entrypoints.openai.api_server --model DIR
    """
    from coldscope.store.db import Store, default_store_path
    from coldscope.tuning import session as ts
    store_file = Path(store_path) if store_path else default_store_path()
    if resume:
        directory = ts.find_session(store_file, session)
        spec = ts.load(directory)
        if command:
            raise ColdscopeError("--resume takes no COMMAND: the session has its own")
        reaped = ts.reap_inflight(spec)
        if reaped and not as_json:
            echo(f"stopped the engine of the interrupted start-up {reaped}", err=True)
    else:
        if not command:
            raise ColdscopeError("give the engine command after `--` (or --resume)")
        spec, directory = _new_session(list(command), parse_env(env_pairs), budget,
                                       parse_fraction(max_loss), timeout, bundle_file,
                                       engine_python, store_file, allow_output_change)
    out = console()
    if not as_json:
        from rich.text import Text

        out.print(Text.assemble(("coldscope tune", "bold"),
                                f" session {spec.id}: budget {spec.budget} start-ups; "
                                f"{sum(k.available for k in spec.knobs)} of {len(spec.knobs)} "
                                "knobs available here"))
    from coldscope.cli.progress import StartupProgress, wanted
    store = Store(store_file)
    show_line = None if (quiet or as_json) else (lambda line: echo(f"  │ {line}", err=True))
    # On a terminal: the running start-up's elapsed time and the stage it is in now.
    live = StartupProgress(wanted(as_json), runs=spec.budget)
    executor = ts.EngineExecutor(spec, directory, store, on_line=show_line, on_start=live.launched,
                                 on_stage=live.stage)

    def progress(req, m, replayed):
        live.done()
        if as_json:
            return
        what = "replayed" if replayed else ("ok" if m.ok else f"failed: {m.reason}")
        t = f"{m.time_to_ready_s:.1f} s" if m.time_to_ready_s is not None else "-"
        echo(f"  start-up {req.index + 1}/{spec.budget}: {req.role} "
             f"{'+'.join(req.knobs) or 'default'}"
             f"{' (seeded caches)' if req.seeded else ''}: {t} [{what}]", err=True)

    from coldscope.launch.runner import _signals_interrupt
    try:
        with _signals_interrupt(), live:  # SIGTERM/SIGHUP stop the tune like Ctrl-C
            outcome = ts.run_search(spec, directory, executor, progress)
    except KeyboardInterrupt:
        echo(f"interrupted; finish with `coldscope tune --resume --session {spec.id}`",
             err=True)
        raise
    from coldscope.tuning.report import tune_json, tune_tables
    doc = tune_json(spec, outcome, store)
    if as_json:
        print_json(doc)
        return
    for item in tune_tables(spec, outcome, doc):
        out.print(item)


def _new_session(command, env, budget, max_loss, timeout, bundle_file, engine_python,
                 store_file, allow_output_change=False):
    import datetime as dt
    import shutil

    from coldscope.engines import resolve
    from coldscope.tuning import session as ts
    py = engine_python
    if py is None and command and "python" in Path(command[0]).name:
        import sys

        py = shutil.which(command[0]) if command[0] != "python" else sys.executable
    engine = resolve(command)
    caps, knobs = engine.tune_catalogue(py)
    if not knobs:
        raise ColdscopeError(f"tune knows no start-up knobs of {engine.name}: no engine "
                             "adapter with a tune catalogue (vLLM's) reads this command")
    sid = ts.new_session_id()
    directory = ts.sessions_dir(store_file) / sid
    spec = ts.SessionSpec(
        id=sid, created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        command=command, env=env, budget=budget, max_throughput_loss=max_loss,
        allow_output_change=allow_output_change, timeout=timeout, knobs=knobs, capabilities=caps,
    )
    if bundle_file:
        from coldscope.tuning.bundle import unpack_for_session
        spec.bundle_key = unpack_for_session(Path(bundle_file), directory, spec)
    ts.save(spec, directory)
    return spec, directory


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
def bundle(output, tune_session, cache_key, store_path, as_json):
    """Pack the caches a tuned configuration relies on, with a manifest (engine, torch and
    Python versions, model hash, machine), for `profile --bundle` / `tune --bundle`."""
    from coldscope.store.db import default_store_path
    from coldscope.tuning import session as ts
    from coldscope.tuning.bundle import pack_session
    from coldscope.util.safeio import check_output_target
    check_output_target(output)  # before the work: never a device node, FIFO or directory
    store_file = Path(store_path) if store_path else default_store_path()
    directory = ts.find_session(store_file, tune_session)
    manifest = pack_session(directory, Path(output), cache_key=cache_key)
    if as_json:
        print_json({"output": output, "manifest": manifest})
    else:
        echo(f"wrote {output}: caches of {manifest['config']['cache_key']} for "
             f"{manifest['engine']['name']} {manifest['engine']['version']} "
             f"(torch {manifest['engine']['torch']}), "
             f"model {manifest['model']['name']} "
             f"({(manifest['model']['sha256'] or 'not hashed')[:12]}), "
             f"{manifest['size_bytes'] / 1e6:.1f} MB")
        echo("use it: coldscope profile --bundle " + shlex.quote(output) + " -- COMMAND")
