"""``coldscope compare``: is b faster than a, stage by stage, with intervals."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from coldscope.cli.common import echo, json_option, print_json, show, store_option
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.analysis.comparison import Comparison, Side
    from coldscope.core.records import Run
@click.command()
@click.option("--a", "cmd_a", default=None, metavar="'CMD'",
              help="Configuration a: one shell command line; leading VAR=value words are its "
                   "environment.")
@click.option("--b", "cmd_b", default=None, metavar="'CMD'", help="Configuration b, likewise.")
@click.option("--runs-a", "runs_a", default=None, metavar="SEL[,SEL...]",
              help="Instead of --a: stored runs (ids, id prefixes or labels, e.g. NAME:a of an "
                   "earlier compare, or a profile --label).")
@click.option("--runs-b", "runs_b", default=None, metavar="SEL[,SEL...]",
              help="Instead of --b: stored runs, likewise.")
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1, 1000),
              help="Measured start-ups of each side (interleaved a b a b ...).")
@click.option("--cache", type=click.Choice(["cold", "warm"]), default="cold", show_default=True,
              help="cold: fresh empty caches per start-up; warm: each side primed once, then "
                   "started on the caches its prime left.")
@click.option("--fail-if-slower", "fail_if_slower", default=None, metavar="X",
              help="Exit 1 when b is resolvably slower than a by more than X: seconds (2s) or "
                   "a percent of a's time to ready (5%).")
@click.option("--timeout", default=900.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds from launch to ready before a start-up is failed.")
@click.option("--label", "name", default=None,
              help="Name of this comparison; its runs are labelled NAME:a and NAME:b "
                   "(default compare-<time>).")
@click.option("--cache-root", default=".coldscope/compare", show_default=True,
              type=click.Path(file_okay=False),
              help="Where the comparison's caches and run directories live.")
@click.option("--keep-caches", is_flag=True, help="Keep the warm caches after the comparison.")
@click.option("--show-output", is_flag=True, help="Echo the engines' output.")
@click.option("--a-standby", "standby_a", default=None, metavar="NAME",
              help="Start a's engines through this standby launcher (`coldscope standby`).")
@click.option("--b-standby", "standby_b", default=None, metavar="NAME",
              help="Start b's engines through this standby launcher, e.g. the same command "
                   "as --a, forked from a process that has imported it.")
@click.option("--standby-dir", default=".coldscope/standby", show_default=True,
              type=click.Path(file_okay=False), help="Where the standby launchers live.")
@click.option("--serving-check", is_flag=True,
              help="While each measured engine is up, run tune's serving check (a greedy "
                   "prompt and a fixed load): the JSON's `serving` has b's throughput over "
                   "a's with its interval, and whether the greedy outputs match (their token "
                   "ids where the engine returns them).")
@store_option
@json_option
def compare_cmd(cmd_a: str | None, cmd_b: str | None, runs_a: str | None, runs_b: str | None,
                repeat: int, cache: Literal["cold", "warm"], fail_if_slower: str | None,
                timeout: float, name: str | None, cache_root: str, keep_caches: bool,
                show_output: bool, standby_a: str | None, standby_b: str | None,
                standby_dir: str, serving_check: bool, store_path: str | None,
                as_json: bool) -> None:
    """Compare two configurations' start-ups: per stage, per sub-step and time to ready, the
    means, b - a with a 95 % interval, and a verdict (faster, slower, unresolved). E.g.

    \b
    coldscope compare --repeat 3 --cache warm \\
      --a 'python -m vllm.entrypoints.openai.api_server --model models/tiny' \\
      --b 'python -m vllm.entrypoints.openai.api_server --model models/tiny --enforce-eager'
    coldscope compare --runs-a NAME:a --runs-b NAME:b --fail-if-slower 5%
    coldscope compare --repeat 5 --cache warm --a 'CMD' --b 'CMD' --b-standby NAME

    Exit 1 when --fail-if-slower trips; docs/compare.md has the method.
    """
    from coldscope.analysis.comparison import parse_threshold, regression
    threshold = parse_threshold(fail_if_slower) if fail_if_slower is not None else None
    no_runs = runs_a is None and runs_b is None
    standby: dict[Side, str] = {}
    if standby_a is not None:
        standby["a"] = standby_a
    if standby_b is not None:
        standby["b"] = standby_b
    serving: dict[str, Any] | None = None
    if cmd_a is not None and cmd_b is not None and no_runs:
        result, serving = _measure(
            cmd_a, cmd_b, repeat=repeat, cache=cache, timeout=timeout, name=name,
            cache_root=Path(cache_root), keep_caches=keep_caches, show_output=show_output,
            store_path=store_path, as_json=as_json, standby=standby,
            standby_dir=Path(standby_dir), serving_check=serving_check)
    elif standby or serving_check:
        raise ColdscopeError("--a-standby/--b-standby/--serving-check start engines: give "
                             "them with --a and --b (commands), not with stored runs")
    elif runs_a is not None and runs_b is not None and cmd_a is None and cmd_b is None:
        result = _stored(runs_a, runs_b, store_path)
    else:
        raise ColdscopeError("give either --a and --b (commands to start) or --runs-a and "
                             "--runs-b (stored runs)")
    if as_json:
        doc = result.to_json()
        if serving is not None:
            doc["serving"] = serving
        print_json(doc)
    else:
        show(result)
        if serving is not None:
            echo(_serving_line(serving))
    for side in ("a", "b"):
        if getattr(result, side).n == 0:
            raise ColdscopeError(f"{side} has no usable run; see `coldscope runs`")
    if threshold is not None:
        why = regression(result, threshold)
        if why:
            echo(f"fail: {why}", err=True)
            raise SystemExit(1)  # 1, not the 2 of a usage error: a regression gate tripped


def _measure(cmd_a: str, cmd_b: str, *, repeat: int, cache: Literal["cold", "warm"],
             timeout: float, name: str | None, cache_root: Path, keep_caches: bool,
             show_output: bool, store_path: str | None, as_json: bool,
             standby: dict[Side, str], standby_dir: Path,
             serving_check: bool) -> tuple[Comparison, dict[str, Any] | None]:
    from coldscope.cli.progress import StartupProgress, wanted
    from coldscope.launch.interleave import arms, run_ab
    from coldscope.launch.runner import new_run_id
    from coldscope.store.db import Store
    name = name or f"compare-{new_run_id()}"
    root = cache_root / name
    two = arms(cmd_a, cmd_b, name=name, cache=cache, cache_root=root / "caches",
               timeout=timeout, standby=standby, standby_dir=standby_dir)
    store = Store(store_path)
    total = 2 * repeat + (2 if cache == "warm" else 0)
    live = StartupProgress(wanted(as_json), total)
    show_line = (lambda line: echo(f"  │ {line}", err=True)) if show_output and not as_json \
        else None
    if not as_json:
        echo(f"compare {name}: {repeat} {cache} start-up(s) of a and of b, interleaved"
             + (", after one prime each" if cache == "warm" else "") + f" ({total} in all)",
             err=True)

    def on_run(side: Side, prime: bool, run: Run) -> None:
        live.done()
        if not as_json:
            what = f"{side} (prime)" if prime else side
            how = f"ready in {run.time_to_ready_s:.2f} s" if run.status == "ok" else \
                f"failed: {run.reason}"
            echo(f"  {what:9} {run.id}  {run.cache or '?':4}  {how}", err=True)

    check = None
    if serving_check:
        from coldscope.tuning.verify import verify
        check = verify
    with live:
        done = run_ab(two, name=name, repeat=repeat, cache=cache, store=store,
                      keep_caches=keep_caches, on_run=on_run, on_line=show_line,
                      on_stage=live.stage, on_launch=live.launched, check=check)
    serving = None
    if serving_check:
        from coldscope.tuning.verify import serving_comparison
        serving = serving_comparison([r for s, r in done.measured if s == "a"],
                                     [r for s, r in done.measured if s == "b"])
    return done.comparison(), serving


def _serving_line(serving: dict[str, Any]) -> str:
    ratio, greedy = serving["ratio"], serving["greedy"]
    n = f"over {serving['a']['n']} and {serving['b']['n']} start-ups"
    if ratio["value"] is None:
        shown = f"not measured ({n})"
    elif ratio["low"] is None:
        shown = f"{ratio['value']:.2f}x, no interval ({ratio['note']}; {n})"
    else:
        verdict = "no difference shown" if serving["includes_1"] else "different"
        shown = (f"{ratio['value']:.2f}x [{ratio['low']:.2f}x, {ratio['high']:.2f}x] {n}: "
                 f"{verdict}")
    text = (f"greedy output the same ({greedy['compared']})" if greedy["same"] else
            f"greedy output differs: {greedy['difference']}" if greedy["same"] is False else
            f"greedy output not compared: {greedy['difference']}")
    return f"serving, b's throughput over a's: {shown}; {text}"


def _stored(runs_a: str, runs_b: str, store_path: str | None) -> Comparison:
    from coldscope.api import compare
    from coldscope.store.db import Store
    from coldscope.store.selection import two_sides
    with Store(store_path, create=False) as store:
        a, b = two_sides(store.runs(status=None), runs_a, runs_b)
    return compare(a, b, a_info={"label": runs_a}, b_info={"label": runs_b})
