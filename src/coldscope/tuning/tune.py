"""The tuner's entry points, which ``coldscope tune`` and the front door (``coldscope.api``)
call: open a session, ``new_session`` (read the engine's catalogue, seed a bundle, write
``session.json``) or ``resume_session`` (find it, stop the engine a killed tune left running),
then ``run_session`` (the search on real start-ups, to a ``TuneResult``).

Above the session, its bundles and its result (``session``, ``bundle``, ``report``), which do
not import this module.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from coldscope.tuning.report import TuneResult, tune_result
from coldscope.tuning.search import check_budget
from coldscope.tuning.session import (
    DEFAULT_BUDGET,
    DEFAULT_TIMEOUT_S,
    ActiveSession,
    EngineExecutor,
    OnMeasured,
    SessionSpec,
    find_session,
    load,
    new_session_id,
    reap_inflight,
    reap_launcher,
    run_search,
    save,
    sessions_dir,
)
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.core.records import Run
    from coldscope.engines import Engine
    from coldscope.engines.knobs import Knob
    from coldscope.store.db import Store


@dataclass(frozen=True)
class TuneSession:
    """A session on disk: its record as last written and the directory holding it.
    ``reaped_run`` is the run id of an interrupted start-up whose engine ``resume_session``
    stopped (None when there was none); ``reaped_launcher`` the pid of the session's standby
    launcher a killed tune left running, which it stopped too."""

    spec: SessionSpec
    directory: Path
    reaped_run: str | None = None
    reaped_launcher: int | None = None


def fit_launcher_knobs(knobs: Sequence[Knob], argv: Sequence[str],
                       engine: Engine) -> list[Knob]:
    """``knobs`` with each launcher knob (``Knob.launcher``) made unavailable, with the reason,
    when the engine's adapter cannot start it through a standby launcher (it does not play
    ``StandbyLaunch``) or the command is not one a launcher runs (``python -m MODULE``,
    ``python SCRIPT`` or a Python console script: ``launch.standby.entry_of``)."""
    from coldscope.engines import StandbyLaunch
    from coldscope.launch.standby import entry_of
    why: str | None = None
    if not isinstance(engine, StandbyLaunch):
        why = f"the {engine.name} adapter cannot start its engine through a standby launcher"
    else:
        try:
            entry_of(argv)
        except ColdscopeError as exc:
            why = f"a standby launcher cannot run this command: {exc}"
    if why is None:
        return list(knobs)
    return [k.model_copy(update={"available": False, "reason": why})
            if k.launcher and k.available else k for k in knobs]


def _engine_python(command: Sequence[str], engine_python: str | None) -> str | None:
    """The interpreter whose engine to read the catalogue from: the one given, else the
    command's own ``python`` (this interpreter for a bare ``python``), else the engine's
    default (None)."""
    if engine_python is not None or not command or "python" not in Path(command[0]).name:
        return engine_python
    return sys.executable if command[0] == "python" else shutil.which(command[0])


def new_session(command: Sequence[str], *, store_path: Path,
                env: Mapping[str, str] | None = None, budget: int = DEFAULT_BUDGET,
                max_throughput_loss: float | None = None, allow_output_change: bool = False,
                timeout: float = DEFAULT_TIMEOUT_S, bundle: Path | None = None,
                engine_python: str | None = None, cold_evict: bool = True) -> TuneSession:
    """Start a tune session of the engine ``command``; nothing is started yet (``run_session``
    does that).

    The engine's adapter (resolved from the command) reads its start-up knobs from the
    installed engine (``Engine.tune_catalogue``, through ``engine_python``, by default the
    command's own ``python``); a ``bundle`` (``coldscope bundle``) is checked against the
    command's engine and model and seeds its configuration's caches; ``session.json`` is
    written under the store's ``tune/`` directory (``sessions_dir(store_path)``).

    ``budget``: engine start-ups to spend in all (at least 2: the default cold and warm).
    ``max_throughput_loss``: the share of serving throughput (0.1 for 10 %) a kept change may
    be shown to lose at most (None: no limit). ``allow_output_change``: keep changes whose
    greedy output differs from the default's. ``timeout``: seconds from launch to ready before
    a start-up is failed. ``env``: extra environment for the engine. ``cold_evict``: before
    each start-up on empty caches, evict the model's and the engine's Python files from the
    page cache, so the cold default is a new node's start-up (False: only the engine caches
    are empty, on a warm machine; the result's ``cold_state`` says which).

    ``ColdscopeError`` when the command is empty, the budget below 2, no adapter with a tune
    catalogue reads the command, or the bundle is refused. A launcher knob (``Knob.launcher``)
    is kept unavailable, with the reason, when the command cannot go through a standby
    launcher (``fit_launcher_knobs``).
    """
    from coldscope.engines import TuneCatalogue, resolve
    from coldscope.tuning.bundle import unpack_for_session
    argv = list(command)
    if not argv:
        raise ColdscopeError("a tune session needs the engine's command line")
    check_budget(budget)
    engine = resolve(argv)
    caps, knobs = engine.tune_catalogue(_engine_python(argv, engine_python)) \
        if isinstance(engine, TuneCatalogue) else ({}, [])
    if not knobs:
        raise ColdscopeError(f"tune knows no start-up knobs of {engine.name}: no engine "
                             "adapter with a tune catalogue reads this command")
    knobs = fit_launcher_knobs(knobs, argv, engine)
    sid = new_session_id()
    directory = sessions_dir(store_path) / sid
    spec = SessionSpec(
        id=sid, created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        command=argv, env=dict(env or {}), budget=budget, max_throughput_loss=max_throughput_loss,
        allow_output_change=allow_output_change, timeout=timeout, cold_evict=cold_evict,
        knobs=knobs, capabilities=caps,
    )
    if bundle is not None:
        spec = spec.evolve(bundle_key=unpack_for_session(Path(bundle), directory, spec))
    save(spec, directory)
    return TuneSession(spec, directory)


def resume_session(store_path: Path, session: str | None = None) -> TuneSession:
    """Open an interrupted session to finish it: ``session`` (an id, or a session directory),
    else the newest under the store's ``tune/`` directory. The engine of a start-up a killed
    tune left running is stopped first (``TuneSession.reaped_run`` names its run), and so is
    the session's standby launcher (``TuneSession.reaped_launcher``).
    ``ColdscopeError`` when there is no such session or its file is unreadable."""
    directory = find_session(store_path, session)
    spec = load(directory)
    launcher = reap_launcher(spec, directory)  # it stops the engine it still runs, too
    return TuneSession(spec, directory, reaped_run=reap_inflight(spec),
                       reaped_launcher=launcher.pid if launcher is not None else None)


def run_session(session: TuneSession, store: Store, *,
                on_line: Callable[[str], None] | None = None,
                on_start: Callable[[Run], None] | None = None,
                on_stage: Callable[[str, float], None] | None = None,
                on_measured: OnMeasured | None = None) -> TuneResult:
    """Run (or finish) the session's search on real start-ups and return its result (what
    ``tune --json`` prints). Each start-up is stored in ``store`` linked to the session, and
    ``session.json`` is rewritten after each one. SIGTERM and SIGHUP stop it like Ctrl-C:
    ``KeyboardInterrupt``, with the session resumable (``resume_session``). The session's
    standby launcher, if a launcher knob started one, is stopped however the search ends.

    ``on_line``: each line the engine prints; ``on_start``: a run (status running) about to
    start; ``on_stage``: (stage, seconds since launch) as the engine's output shows a stage;
    ``on_measured``: each start-up finished, or replayed from the file on resume."""
    from coldscope.launch.runner import signals_interrupt
    active = ActiveSession(session.spec, session.directory)
    executor = EngineExecutor(active, store, on_line=on_line, on_start=on_start,
                              on_stage=on_stage)
    with signals_interrupt():
        try:
            outcome = run_search(active, executor, on_measured)
        finally:  # finished, failed or interrupted: the session's launcher goes
            executor.close()
    return tune_result(active.spec, outcome, store)
