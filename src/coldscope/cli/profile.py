"""Commands of the profiler: profile, runs, show, parse, trace, export, demo."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from coldscope.cli.common import console, echo, json_option, parse_env, print_json, store_option
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import dumps_json

if TYPE_CHECKING:
    from rich.console import Console

    from coldscope.cli.progress import StartupProgress
    from coldscope.core.records import Run
    from coldscope.ingest.logfiles import ParsedLog
    from coldscope.launch.runner import RunConfig
    from coldscope.store.db import Saved
@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1),
              help="Start-ups to measure.")
@click.option("--cache", type=click.Choice(["cold", "warm"]), default="cold", show_default=True,
              help="cold: fresh empty caches and HOME per run; warm: reuse caches of this config.")
@click.option("--timeout", default=900.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds from launch to ready before a run is failed.")
@click.option("--health-url", default=None, help="Readiness URL (default http://HOST:PORT/health).")
@click.option("--ready-pattern", default=None, help="Regex on engine output meaning 'ready'.")
@click.option("--no-request", is_flag=True, help="Do not send the first request.")
@click.option("--no-probe", is_flag=True, help="Do not load the in-process probe.")
@click.option("--no-spans", is_flag=True, help="Do not receive the engine's OTLP spans.")
@click.option("--imports", is_flag=True,
              help="Time every import in each engine process (the probe's import timing): "
                   "`show` lists each process's costliest packages.")
@click.option("--drop-page-cache", is_flag=True,
              help="Evict the weights from the page cache first.")
@click.option("--label", default=None, help="A label stored with the runs.")
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE",
              help="Extra environment for the engine (repeatable).")
@click.option("--cache-root", default=".coldscope/caches", show_default=True,
              type=click.Path(file_okay=False), help="Where per-run caches live.")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False),
              help="One cache directory for every run given it, whatever its command, kept "
                   "as a persistent volume keeps it: each run finds what earlier ones left "
                   "(implies --cache warm; no priming run). A run that compiles although the "
                   "directory held compiled graphs gets `compile_cache_miss`, naming what "
                   "changed.")
@click.option("--otlp-export", default=None, metavar="URL",
              help="Also send each run's start-up spans to this OTLP/HTTP collector.")
@click.option("--quiet", is_flag=True, help="Do not echo the engine's output.")
@click.option("--bundle", default=None, type=click.Path(dir_okay=False),
              help="Start from the caches of a `coldscope bundle` file (implies --cache warm).")
@click.option("--standby", default=None, metavar="NAME",
              help="Start the engine through this standby launcher (`coldscope standby start "
                   "NAME -- CMD`): forked from a process that has already imported it.")
@click.option("--standby-dir", default=".coldscope/standby", show_default=True,
              type=click.Path(file_okay=False), help="Where the standby launchers live.")
@store_option
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def profile(repeat: int, cache: Literal["cold", "warm"], timeout: float, health_url: str | None,
            ready_pattern: str | None, no_request: bool, no_probe: bool, no_spans: bool,
            imports: bool, drop_page_cache: bool, label: str | None, env_pairs: tuple[str, ...],
            cache_root: str, cache_dir: str | None, otlp_export: str | None, quiet: bool,
            bundle: str | None, standby: str | None, standby_dir: str,
            store_path: str | None, as_json: bool, command: tuple[str, ...]) -> None:
    """Profile the start-up of an engine COMMAND (after `--`), e.g.

    coldscope profile --repeat 3 -- python -m vllm.entrypoints.openai.api_server --model DIR
    """
    from coldscope.api import profile as run_profile
    from coldscope.launch.runner import RunConfig
    from coldscope.store.db import Store
    if imports and no_probe:
        raise click.UsageError("--imports needs the probe (drop --no-probe)")
    if cache_dir is not None:
        source = click.get_current_context().get_parameter_source("cache")
        if cache == "cold" and source is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("--cache-dir keeps its caches between runs: it cannot be "
                                   "used with --cache cold")
        if bundle:
            raise click.UsageError("--bundle seeds coldscope's own warm cache; give either "
                                   "--bundle or --cache-dir")
        cache = "warm"
    if bundle:
        cache = "warm"  # a bundle fills the warm cache (``coldscope.api.profile``)
    config = RunConfig(
        command=list(command), cache=cache, repeat=repeat, timeout=timeout,
        health_url=health_url, ready_pattern=ready_pattern, first_request=not no_request,
        probe=not no_probe, spans=not no_spans, imports=imports,
        drop_page_cache=drop_page_cache, label=label,
        env=parse_env(env_pairs), cache_root=Path(cache_root),
        cache_dir=Path(cache_dir) if cache_dir is not None else None,
        standby=standby, standby_dir=Path(standby_dir),
    )
    from coldscope.engines import resolve
    engine = resolve(config.command)
    if engine.host(config.command) is None and \
            engine.with_host(config.command, "127.0.0.1") is not None:
        echo("note: no --host given: the engine is bound to 127.0.0.1 (not reachable "
             "from the network); pass --host to choose", err=True)
    store = Store(store_path)
    out = console()
    show_line = None if (quiet or as_json) else (lambda line: echo(f"  │ {line}", err=True))
    live = _startup_progress(config, as_json, seeded=bool(bundle))

    def on_run(record: Run) -> None:
        live.done()
        if otlp_export and record.status == "ok":
            from coldscope.export.trace import send_otlp
            sent = send_otlp(record, otlp_export)
            if not as_json:
                echo(sent.message(otlp_export), err=True)
        if not as_json:
            _print_run(out, record)

    with live:
        records = run_profile(config, store, bundle=bundle, on_run=on_run, on_line=show_line,
                              on_stage=live.stage, on_launch=live.launched)
    if as_json:
        print_json({"runs": [r.to_json() for r in records]})
    if not any(r.status == "ok" for r in records):
        raise ColdscopeError(f"all {len(records)} run(s) failed; see `coldscope runs`")


def _startup_progress(config: RunConfig, as_json: bool, seeded: bool = False
                      ) -> StartupProgress:
    """Elapsed time and the engine's current stage while it starts, on a terminal only (also
    with --quiet, which only silences the engine's output)."""
    from coldscope.cli.progress import StartupProgress, wanted
    from coldscope.launch.runner import needs_priming
    # the runner primes an empty warm cache first, unless a bundle (``seeded``) fills it
    primes = 0 if seeded or not needs_priming(config) else 1
    return StartupProgress(wanted(as_json), config.repeat + primes)


def _print_run(out: Console, record: Run) -> None:
    """Its timeline and findings, or why it failed (``render.tables.render_run``)."""
    from coldscope.render import render
    out.print(render(record))


@click.command()
@click.option("--status", type=click.Choice(["ok", "failed", "all"]), default="all",
              show_default=True)
@click.option("--cache", type=click.Choice(["cold", "warm"]), default=None)
@click.option("--label", default=None)
@store_option
@json_option
def runs(status: str, cache: str | None, label: str | None, store_path: str | None,
         as_json: bool) -> None:
    """The stored runs, one line each."""
    from coldscope.render.tables import runs_table
    from coldscope.store.db import Store
    records = Store(store_path, create=False).runs(
        status=None if status == "all" else status, cache=cache, label=label)
    if as_json:
        print_json({"runs": [r.to_json() for r in records]})
    else:
        out = console()
        out.print(runs_table(records, width=out.width))


@click.command()
@click.argument("run_id")
@click.option("--env", "with_env", is_flag=True,
              help="Also the environment and the run's notes (versions, CPU, GPUs, command).")
@store_option
@json_option
def show(run_id: str, with_env: bool, store_path: str | None, as_json: bool) -> None:
    """The timeline of one run: six stages, sub-steps, sources."""
    from coldscope.store.db import Store
    record = Store(store_path, create=False).run(run_id)
    if as_json:
        print_json(record.to_json())
    else:
        from coldscope.render.tables import environment_table, imports_table, processes_table
        out = console()
        _print_run(out, record)
        if any(p.role != "helper" for p in record.processes):
            out.print(processes_table(record))
        if record.imports:
            out.print(imports_table(record))
        if with_env:
            out.print(environment_table(record))


@click.command()
@click.argument("logs", nargs=-1, required=True, metavar="LOG|DIR|- ...")
@click.option("--save", is_flag=True,
              help="Also store each start-up as a run (origin log), once: one already stored "
                   "(by parse --save or serve) is not stored again.")
@click.option("--label", default=None,
              help="With --save: a label stored with the runs; start-ups stored before under "
                   "another label are relabelled (and counted: relabelled: N).")
@click.option("--vs-paper", is_flag=True,
              help="Also what the parser of 'Breaking the Ice' (MLSys 2026) reads from this log "
                   "and what it misses.")
@click.option("--max-bytes", type=click.IntRange(1), default=None,
              help="Largest log read, in bytes, also once decompressed (default "
                   "COLDSCOPE_MAX_INPUT_BYTES, else 128 MiB).")
@click.option("--max-lines", type=click.IntRange(1), default=None,
              help="Most lines read from one log (default 500,000; a run of blank lines "
                   "counts as 40 at most).")
@store_option
@json_option
def parse(logs: tuple[str, ...], save: bool, label: str | None, vs_paper: bool,
          max_bytes: int | None, max_lines: int | None, store_path: str | None,
          as_json: bool) -> None:
    """The timeline of saved engine logs (vLLM, SGLang): files, directories (recursively),
    `-` for standard input, gzipped or rotated logs. Stages a log cannot show are unknown;
    bootstrap is timed on the log's own clock when the log shows the engine's start.

    One log: its timeline (exit 2 when it failed or was refused). Several, or a log that
    holds several start-ups (a restart): one line per start-up (LOG#1, LOG#2, ...) and a fleet
    summary per engine, version and model (exit 2 only when a file could not be read); --json
    gives {"runs": [...], "refused": [...], "fleet": [...]}."""
    from coldscope.api import parse_logs
    from coldscope.ingest.logfiles import STDIN
    from coldscope.store.db import default_store_path
    if label is not None and not save:
        raise ColdscopeError("--label labels the runs --save stores: give --save too")
    single = len(logs) == 1 and (logs[0] == STDIN or not Path(logs[0]).is_dir())
    held: list[str] = []  # ids of start-ups the store already held
    relabelled: list[str] = []  # ... under another label, which --label replaced

    def on_stored(run: Run, saved: Saved) -> None:
        if saved == "held":
            held.append(run.id)
        elif saved == "relabelled":
            relabelled.append(run.id)

    parsed = parse_logs(logs, max_bytes=max_bytes, max_lines=max_lines,
                        store=(store_path or default_store_path()) if save else None,
                        label=label, on_stored=on_stored)
    if not parsed:
        raise ColdscopeError(f"no files found in {', '.join(logs)}")
    saved = save and any(p.run is not None for p in parsed)
    if held:  # on stderr: stdout stays the reading (or the JSON) alone
        echo(f"already stored: {len(held)} (not stored again: {_some(held)})", err=True)
    if relabelled:
        echo(f"relabelled: {len(relabelled)} (stored before, now labelled {label!r}: "
             f"{_some(relabelled)})", err=True)
    if single and len(parsed) == 1:  # one log of one start-up (else a line per start-up)
        _print_one(parsed[0], logs[0], vs_paper=vs_paper, saved=saved, as_json=as_json)
        return
    _print_many(parsed, vs_paper=vs_paper, saved=saved, as_json=as_json)
    unreadable = [p for p in parsed if p.status == "unreadable"]
    if unreadable:
        raise ColdscopeError(f"{len(unreadable)} of {len(parsed)} logs could not be read "
                             f"(first: {unreadable[0].reason})")


def _some(ids: Sequence[str], shown: int = 5) -> str:
    return ", ".join(ids[:shown]) + (", ..." if len(ids) > shown else "")


def _run_doc(run: Run, vs_paper: bool) -> dict[str, Any]:
    doc = run.to_json()
    if not vs_paper:  # the comparison with the paper's parser is asked for, not default
        doc["paper_metrics"] = doc["missed_by_paper_parser"] = None
    return doc


def _print_one(p: ParsedLog, given: str, *, vs_paper: bool, saved: bool,
               as_json: bool) -> None:
    """``parse LOG``: the run as JSON or its timeline (``render.logs.parsed_log``); a log
    that is not ok exits 2."""
    if p.run is None:
        raise ColdscopeError(p.reason or f"{given}: not parsed")
    run = p.run
    if as_json:
        print_json(_run_doc(run, vs_paper))
    else:
        from coldscope.render.logs import parsed_log
        console().print(parsed_log(run, vs_paper=vs_paper, saved=saved))
    if run.status != "ok":
        raise ColdscopeError(f"{given}: {run.reason}")


def _print_many(parsed: Sequence[ParsedLog], *, vs_paper: bool, saved: bool,
                as_json: bool) -> None:
    """``parse LOG LOG ...`` / ``parse DIR``: one line per log, then the fleet summary
    (``render.logs.parsed_logs``)."""
    from coldscope.ingest.logfiles import fleet_summary
    runs = [p.run for p in parsed if p.run is not None]
    fleet = fleet_summary(runs)
    if as_json:
        print_json({"runs": [_run_doc(r, vs_paper) for r in runs],
                    "refused": [p.to_json() for p in parsed if p.run is None],
                    "fleet": [g.to_json() for g in fleet]})
        return
    from coldscope.render.logs import parsed_logs
    out = console()
    out.print(parsed_logs(parsed, fleet, saved=saved, width=out.width))


@click.command()
@click.argument("run_id")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Where to write the Chrome trace JSON (open it in ui.perfetto.dev).")
@click.option("--otlp-export", default=None, metavar="URL", help="Also send to a collector.")
@store_option
@json_option
def trace(run_id: str, output: str, otlp_export: str | None, store_path: str | None,
          as_json: bool) -> None:
    """Write a run as a Chrome trace / Perfetto file: the reconciled stages, then one process
    per engine process (real pids) with its sub-steps nested in their stages and, for a run
    profiled with --imports, its imports of 10 ms or more nested in those."""
    from coldscope.capture.imports import import_intervals
    from coldscope.export.trace import IMPORT_CATEGORY, chrome_trace, send_otlp
    from coldscope.store.db import Store
    from coldscope.util.safeio import check_output_target, write_atomic, writes_to_stdout
    check_output_target(output)
    with Store(store_path, create=False) as store:
        run = store.run(run_id)
        if run.status != "ok":
            raise ColdscopeError(f"run {run.id} failed ({run.reason}); no timeline")
        evidence = store.evidence(run.id)
        if not run.segments and "saved_log" in evidence:  # a log saved before it was drawn
            run = run.with_timeline(store.timeline(run.id))
    launch_mono = (evidence.get("launch") or {}).get("mono")
    imports = (import_intervals(evidence["imports"], launch_mono=float(launch_mono),
                                ready_at=run.time_to_ready_s)
               if evidence.get("imports") and launch_mono is not None else None)
    data = chrome_trace(run, imports=imports)
    n_imports = (sum(e.get("cat") == IMPORT_CATEGORY for e in data["traceEvents"])
                 if imports is not None else None)
    try:
        write_atomic(output, dumps_json(data, indent=None))  # no NaN/Infinity
    except OSError as exc:
        raise ColdscopeError(f"cannot write {output}: {exc.strerror or exc}") from None
    sent = send_otlp(run, otlp_export, imports=imports) if otlp_export else None
    said = writes_to_stdout(output)  # the trace is on stdout: what was written, on stderr
    if as_json:
        print_json({"run": run.id, "output": output, "events": len(data["traceEvents"]),
                    "import_slices": n_imports, "otlp_export": otlp_export,
                    "otlp": {"status": sent.status, "spans": sent.spans} if sent else None},
                   err=said)
    else:
        slices = f", {n_imports} import slices" if n_imports is not None else ""
        echo(f"wrote {output} ({len(data['traceEvents'])} events{slices}); open it in "
             "ui.perfetto.dev", err=said)
        if sent and otlp_export:
            echo(sent.message(otlp_export), err=said)


@click.command()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="CSV or Parquet file (by extension, or --format).")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default=None)
@click.option("--runs", "selectors", default=None, metavar="SEL[,SEL...]",
              help="Only runs whose cache (cold, warm), label or id prefix is one of these.")
@click.option("--model", default=None, help="Only runs of this model (name or path).")
@click.option("--status", type=click.Choice(["ok", "failed", "all"]), default="all",
              show_default=True)
@store_option
@json_option
def export(output: str, fmt: str | None, selectors: str | None, model: str | None, status: str,
           store_path: str | None, as_json: bool) -> None:
    """Export stored runs, one row per run, for sharing: the same columns and types in CSV and
    Parquet whatever the runs hold (docs/export.md); the same filters as `report`."""
    from coldscope.export.table import export_runs
    from coldscope.store.db import Store
    from coldscope.store.selection import describe, parse_selectors, select_runs
    from coldscope.util.safeio import writes_to_stdout
    sel = parse_selectors(selectors)
    with Store(store_path, create=False) as store:
        runs = select_runs(store.runs(status=None if status == "all" else status), sel, model)
    if not runs and (sel or model):
        raise ColdscopeError(f"no runs match {describe(sel, model)}")
    n = export_runs(runs, output, fmt)
    said = writes_to_stdout(output)  # the table is on stdout: what was written, on stderr
    if as_json:
        print_json({"output": output, "runs": n}, err=said)
    else:
        echo(f"wrote {n} runs to {output}", err=said)


@click.command()
@click.option("--model", "model_dir", default="models/tiny", show_default=True,
              type=click.Path(file_okay=False))
@click.option("--port", default=8765, show_default=True)
@store_option
@json_option
def demo(model_dir: str, port: int, store_path: str | None, as_json: bool) -> None:
    """Profile the tiny local model cold, then warm, and print the timelines side by side."""
    from rich.text import Text

    from coldscope.api import profile as run_profile
    from coldscope.engines import demo_command
    from coldscope.launch.runner import RunConfig
    from coldscope.render.tables import compare_table
    from coldscope.store.db import Store
    if not (Path(model_dir) / "config.json").exists():
        raise ColdscopeError(f"no model in {model_dir}; make one with `coldscope make-model`")
    command = demo_command(model_dir, port)
    cache_root = Path(".coldscope") / "demo-caches"
    shutil.rmtree(cache_root, ignore_errors=True)  # cold must really be cold
    config = RunConfig(command=command, cache="warm", repeat=1, label="demo",
                       cache_root=cache_root)
    out = console()
    if not as_json:
        out.print(Text.assemble(("coldscope demo", "bold"), ": one cold start-up (empty caches), "
                                "then one warm (caches of the cold run); about 2-4 minutes on "
                                "2 cores."))
    store = Store(store_path)
    live = _startup_progress(config, as_json)

    def on_run(record: Run) -> None:
        live.done()
        if not as_json:
            _print_run(out, record)

    with live:
        records = run_profile(config, store, on_run=on_run, on_stage=live.stage,
                              on_launch=live.launched)
    if as_json:
        print_json({"runs": [r.to_json() for r in records]})
        return
    ok = [r for r in records if r.status == "ok"]
    if len(ok) == 2:
        out.print(compare_table(ok))
    out.print(f"stored {len(records)} runs in {store.path}; try `coldscope runs`, "
              f"`coldscope show {records[-1].id}`, `coldscope trace {records[-1].id} "
              "-o run.json`")
    if len(ok) < len(records):
        raise ColdscopeError("a demo run failed; see `coldscope runs`")
