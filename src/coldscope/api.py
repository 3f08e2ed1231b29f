"""coldscope's front door: one plain function per thing coldscope does, over typed records.

``import coldscope`` re-exports these (lazily: see ``coldscope/__init__.py``), and the CLI calls
exactly these, so what a command can do a program can do, with the same checks and the same
one-line ``ColdscopeError`` for bad input. Each function takes typed records (``Run``,
``RunConfig``, ``PlanRequest``, ``SimRequest``, ``StartupModel``, ``TrainingSet``, an engine
command line) and takes a path only where the thing is a file (a log, a startup model file, a
model directory, a bundle).

Two of them are the library's own functions, re-exported as they are: ``compare``
(``coldscope.analysis.comparison.compare``) and ``plan`` (``coldscope.planning.planner.plan``)
already have the front door's shape; so has ``ScaleAdvisor`` (``coldscope.scaling``), the
start-up-aware scaling policy an autoscaler ticks, with its ``ScaleDecision``. (``import
coldscope`` loads ``ScaleAdvisor`` from ``coldscope.scaling`` itself, not through this
module, so that an autoscaler importing it loads no planner.) The rest are thin wrappers that
gather what the CLI used to do around the library call (reading a log per start-up, seeding
caches from a bundle, loading a startup model file, picking a training source, opening or
resuming a tune session).

Every function imports what it uses when it is called, and the re-exported names are loaded
on first access (``__getattr__``), so importing this module loads nothing but itself: a script
that only predicts never loads the planner, the tuner or an engine adapter, and nothing here
loads an engine (torch, vLLM), a web server, pyarrow or Ray. ``docs/api.md`` has a worked
example of each function.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.analysis.comparison import compare
    from coldscope.core.records import Run
    from coldscope.ingest.logfiles import ParsedLog
    from coldscope.launch.runner import RunConfig
    from coldscope.planning.planner import plan
    from coldscope.prediction.core import Prediction
    from coldscope.prediction.features import ModelFeatures
    from coldscope.prediction.startup_model import StartupModel
    from coldscope.prediction.training import TrainingSet
    from coldscope.scaling.advisor import ScaleAdvisor, ScaleDecision
    from coldscope.sim.request import SimInputs, SimRequest
    from coldscope.sim.simulate import SimResult
    from coldscope.sim.sweep import SweepResult
    from coldscope.store.db import Saved, Store
    from coldscope.tuning.report import TuneResult
    from coldscope.tuning.search import Measurement, TrialRequest
    from coldscope.tuning.tune import TuneSession

__all__ = ["ScaleAdvisor", "ScaleDecision", "calibrate", "compare", "fit", "parse_log",
           "parse_logs", "plan", "predict", "profile", "simulate", "tune"]

#: A file or directory argument: a ``str`` or a ``pathlib.Path``.
PathArg = str | os.PathLike[str]

#: The library's own functions and records this module re-exports as they are -> their module,
#: imported on first access, so that ``predict`` never loads the planner.
_REEXPORTED = {
    "compare": "coldscope.analysis.comparison",
    "plan": "coldscope.planning.planner",
    "ScaleAdvisor": "coldscope.scaling.advisor",
    "ScaleDecision": "coldscope.scaling.advisor",
}


def __getattr__(name: str) -> Any:
    """A re-exported name, imported from its module on first access and kept."""
    home = _REEXPORTED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


# -- measuring ----------------------------------------------------------------------------------


def parse_log(path: PathArg, *, max_bytes: int | None = None) -> list[Run]:
    """The start-ups a saved engine log shows (vLLM or SGLang, plain or gzipped), one ``Run``
    each, in the order they appear.

    A log usually holds one start-up; an engine restarted into the same file, or logs appended
    to one another, hold several, and each becomes its own run (named ``FILE#1``, ``FILE#2``,
    ...), so that one start-up's numbers never mix with the next one's. A start-up that never
    shows the engine ready is a run with ``status="failed"`` and the reason quoted from the
    log. Stages the log cannot show are unknown (None), and so is the cache state.

    This is what ``coldscope parse LOG`` prints (``coldscope.ingest.logfiles``). ``max_bytes``
    bounds what is read, also once decompressed (default ``COLDSCOPE_MAX_INPUT_BYTES``, else
    128 MiB); at most ``ingest.logfiles.MAX_LOG_LINES`` lines are read. Raises
    ``ColdscopeError`` (one line) when the file cannot be read, is past a bound or is not a
    log of a known engine.
    """
    from coldscope.ingest.logfiles import STDIN
    given = os.fspath(path)
    if Path(given).is_dir():
        raise ColdscopeError(f"{given} is a directory; parse_log reads one log file")
    # "-" is standard input to ``coldscope parse``; here it is a file of that name
    name = os.path.join(".", given) if given == STDIN else given
    runs = []
    for parsed in _read_logs([name], max_bytes=max_bytes, single=True):
        if parsed.run is None:
            raise ColdscopeError(parsed.reason or f"{given}: not parsed")
        runs.append(parsed.run)
    return runs


def parse_logs(paths: Sequence[PathArg], *, max_bytes: int | None = None,
               max_lines: int | None = None,
               store: Store | PathArg | None = None, label: str | None = None,
               on_stored: Callable[[Run, Saved], None] | None = None) -> list[ParsedLog]:
    """Every start-up in saved engine logs, as ``coldscope parse LOG...`` reads them: files,
    directories (recursively) and ``-`` for standard input; one ``ParsedLog`` per start-up
    (``run`` and its status) or per log that was skipped, unreadable or refused (``reason``),
    in order. Unlike ``parse_log``, a log that cannot be read is an entry, not an error.

    Given one log (not a directory), its runs are named after the file's base name, as
    ``parse_log`` names them; else after the path as given. Each run's ``started_at`` is the
    log's own time (``ingest.assemble.log_started_at``: a stamp without a year takes the
    file's). ``max_bytes`` and ``max_lines`` bound each log (defaults as for ``parse_log``).
    ``store`` (a ``Store`` or a store file, opened only when there is a run to store): each
    run is also stored with the lines it was read from, under the id of what the start-up is
    (``store.logruns.startup_id``, the id ``serve`` gives the same start-up), with ``label``;
    a start-up the store already holds is not stored again. The returned runs carry those
    ids; ``on_stored(run, saved)`` is told of each run and what storing it did
    (``Store.save_startup``: ``stored``, ``relabelled`` when the store held it under
    another label than ``label``, ``held``).
    """
    import dataclasses

    from coldscope.ingest.logfiles import STDIN
    from coldscope.store.logruns import startup_id
    given = [os.fspath(p) for p in paths]
    single = len(given) == 1 and (given[0] == STDIN or not Path(given[0]).is_dir())
    parsed = []
    for p in _read_logs(given, max_bytes=max_bytes, max_lines=max_lines, single=single):
        if p.run is not None and store is not None:
            update: dict[str, Any] = {"id": startup_id(p.lines)}
            if label is not None:
                update["label"] = label
            p = dataclasses.replace(p, run=p.run.evolve(**update))
        parsed.append(p if store is not None else dataclasses.replace(p, lines=[]))
    if store is None or not any(p.run is not None for p in parsed):
        return parsed
    from coldscope.store.db import Store
    opened = store if isinstance(store, Store) else Store(os.fspath(store))
    try:
        for p in parsed:
            if p.run is not None:
                saved = opened.save_startup(p.run, p.lines)  # saved before: that run
                if on_stored is not None:
                    on_stored(p.run, saved)
    finally:
        if opened is not store:  # opened here: closed here
            opened.close()
    return parsed


def _read_logs(given: Sequence[str], *, max_bytes: int | None = None,
               max_lines: int | None = None, single: bool = False) -> Iterator[ParsedLog]:
    """``ingest.logfiles.parse_logs`` of ``given``, each run's ``started_at`` the log's own
    time (``ingest.assemble.log_started_at``). A stamp without a year takes it from when the
    file was last written, and a start-up of a file that holds several from the start of the
    one after it (they ran in the file's order): a log of September's start-up followed by
    February's, written in December, is of September last year. The lines are kept."""
    import dataclasses
    from itertools import groupby

    from coldscope.ingest.assemble import NO_YEAR, log_started_at
    from coldscope.ingest.logfiles import MAX_LOG_LINES
    from coldscope.ingest.logfiles import parse_logs as read_logs
    read = read_logs(given, limit=max_bytes, max_lines=max_lines or MAX_LOG_LINES,
                     single=single, keep_lines=True)
    for _, parts in groupby(read, key=lambda p: id(p.source)):
        held = list(parts)  # one file's start-ups: dated from the last back
        bound = _mtime(held[0].source.path)
        for k in range(len(held) - 1, -1, -1):
            p = held[k]
            if p.run is None:
                continue
            started, unknown = log_started_at(p.lines, bound)
            update: dict[str, Any] = {"started_at": started}
            if not unknown:  # the file's time gave the year read_run could not know
                update["notes"] = [n for n in p.run.notes if not n.startswith(NO_YEAR)]
                bound = _as_unix(started, bound)
            held[k] = dataclasses.replace(p, run=p.run.evolve(**update))
        yield from held


def _as_unix(iso: str, otherwise: float | None) -> float | None:
    """An ISO time as Unix seconds (one without a zone as local time, as the year of a stamp
    without one was inferred); ``otherwise`` when it is not one."""
    import datetime as dt
    try:
        return dt.datetime.fromisoformat(iso).timestamp()
    except (ValueError, OverflowError, OSError):
        return otherwise


def _mtime(path: Path | None) -> float | None:
    """A log file's modification time; None for standard input or a file gone since."""
    if path is None:
        return None
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def profile(config: RunConfig, store: Store | None = None, *, bundle: PathArg | None = None,
            on_run: Callable[[Run], None] | None = None,
            on_line: Callable[[str], None] | None = None,
            on_stage: Callable[[str, float], None] | None = None,
            on_launch: Callable[[Run], None] | None = None) -> list[Run]:
    """Start the engine command of ``config`` ``config.repeat`` times and measure each
    start-up (``coldscope.launch.runner.profile``): one ``Run`` per start-up, in order, each
    also stored in ``store`` as soon as it ends when a store is given.

    ``bundle``: a ``coldscope bundle`` file whose caches the start-ups begin from (checked
    against this command's engine, its version and the model before anything starts; implies
    ``cache="warm"``). The callbacks feed live displays: ``on_launch(run)`` just before each
    engine starts, ``on_line(text)`` per output line, ``on_stage(stage, seconds)`` when the
    engine enters a stage, ``on_run(run)`` when a start-up ends. Ctrl-C stops the engine,
    stores the interrupted run as failed and re-raises ``KeyboardInterrupt``.
    """
    from coldscope.launch.runner import profile as run_profile
    if bundle is not None:
        config = _seeded(config, Path(bundle))
    return run_profile(config, store, on_run=on_run, on_line=on_line, on_stage=on_stage,
                       on_launch=on_launch)


def _seeded(config: RunConfig, bundle: Path) -> RunConfig:
    """``config`` made warm, its warm cache root filled from ``bundle`` (refused when the
    bundle was made for another engine, engine version or model)."""
    from coldscope.launch.envs import engine_path, engine_python
    from coldscope.launch.runner import cache_dirs
    from coldscope.tuning.bundle import seed_cache_root
    if config.cache_dir is not None:
        raise ColdscopeError("a bundle seeds coldscope's own warm cache; give either a bundle "
                             "(--bundle) or a shared cache directory (--cache-dir)")
    config = config.model_copy(update={"cache": "warm"})
    seed_cache_root(bundle, cache_dirs(config, "x").root, argv=config.command,
                    engine_python=engine_python(config.command[0], engine_path()))
    return config


def tune(command: Sequence[str] = (), store: Store | PathArg | None = None, *,
         resume: bool | str = False, env: Mapping[str, str] | None = None,
         budget: int | None = None, max_throughput_loss: float | None = None,
         allow_output_change: bool = False, timeout: float | None = None,
         bundle: PathArg | None = None, engine_python: str | None = None,
         cold_evict: bool = True, on_open: Callable[[TuneSession], None] | None = None,
         on_line: Callable[[str], None] | None = None,
         on_start: Callable[[Run], None] | None = None,
         on_stage: Callable[[str, float], None] | None = None,
         on_measured: Callable[[TrialRequest, Measurement, bool], None] | None = None,
         ) -> TuneResult:
    """The fastest start-up of the engine ``command`` on this machine, found and proved on
    real start-ups (``coldscope.tuning.tune``): the default started cold and warm, the
    engine's start-up knobs tried within ``budget`` start-ups in all, and the winner
    confirmed against the default with intervals. Returns the ``TuneResult`` that
    ``coldscope tune --json`` prints.

    Every start-up is stored in ``store`` (a ``Store`` or a store file, opened once the
    session is; default: the usual store), and the session in ``tune/`` beside the store
    file, rewritten after each start-up, so an interrupted tune resumes: ``resume=True``
    finishes the newest session, ``resume="tune-..."`` that one (then ``command`` and the
    session's options are not given again). ``budget``: start-ups in all (default
    ``tuning.session.DEFAULT_BUDGET``, 16); ``max_throughput_loss``: the share of serving
    throughput (0.1 for 10 %) a kept change may be shown to lose at most;
    ``allow_output_change``: keep changes whose greedy output differs from the default's;
    ``timeout``: seconds from launch to ready before a start-up fails (default
    ``tuning.session.DEFAULT_TIMEOUT_S``, 900); ``env``: extra environment for the engine;
    ``bundle``: a
    ``coldscope bundle`` file that seeds its configuration's caches; ``engine_python``: the
    interpreter whose engine lists the knobs (default: the command's ``python``);
    ``cold_evict``: evict the model's and the engine's Python files from the page cache before
    each start-up on empty caches, as on a new node (the result's ``baselines.cold_state``
    says what the cold start-ups had). ``on_open(session)``: the session opened (its
    ``spec``: id, budget, knobs; ``reaped_run``: the run whose engine a resume stopped),
    before its first start-up. The other callbacks feed live displays, as for ``profile``;
    ``on_measured(request, measurement, replayed)`` after each start-up. Ctrl-C (or SIGTERM,
    SIGHUP) stops the engine and raises ``KeyboardInterrupt`` with the session resumable.
    """
    from coldscope.store.db import Store, default_store_path
    from coldscope.tuning import session as spec_file
    from coldscope.tuning import tune as ts
    store_path = store.path if isinstance(store, Store) else \
        default_store_path() if store is None else Path(store)
    if resume:
        if command:
            raise ColdscopeError("resuming a tune session takes no command: the session has "
                                 "its own")
        opened = ts.resume_session(store_path, resume if isinstance(resume, str) else None)
    else:
        opened = ts.new_session(
            command, store_path=store_path, env=env,
            budget=spec_file.DEFAULT_BUDGET if budget is None else budget,
            max_throughput_loss=max_throughput_loss,
            allow_output_change=allow_output_change,
            timeout=spec_file.DEFAULT_TIMEOUT_S if timeout is None else timeout,
            bundle=None if bundle is None else Path(bundle), engine_python=engine_python,
            cold_evict=cold_evict)
    if on_open is not None:
        on_open(opened)
    return ts.run_session(opened, store if isinstance(store, Store) else Store(store_path),
                          on_line=on_line, on_start=on_start, on_stage=on_stage,
                          on_measured=on_measured)


# -- predicting ---------------------------------------------------------------------------------


def fit(training: TrainingSet | Iterable[Run], *,
        formulas: str | Mapping[str, tuple[str, ...]] = "auto",
        kinds: Sequence[str] = ("dense",), level: float = 0.9) -> StartupModel:
    """A startup model fitted on measured start-ups: one small linear formula per stage
    (``coldscope.prediction.startup_model.StartupModel``), with ``level`` prediction intervals.

    ``training``: a ``TrainingSet`` (``coldscope.prediction.training``: from stored runs, a
    store file or the paper's artifacts), or ``Run`` records, which must share one setting
    (engine, cache state, flags, storage) and name readable model directories, since the
    formulas read each model's features. ``formulas``: ``"auto"`` (per stage, the candidate
    with the lowest leave-one-model-out error), ``"paper"``, or stage -> terms. ``kinds``: the
    model kinds trained on (``dense``, ``moe``, ``hybrid``); others are reported as excluded.
    Save the result with ``.save(path)``; ``predict`` and ``calibrate`` take it.
    """
    from coldscope.prediction.features import Kind
    from coldscope.prediction.startup_model import StartupModel
    known = get_args(Kind)
    if not kinds or any(k not in known for k in kinds):
        raise ColdscopeError(f"model kinds (--kinds) are {', '.join(known)}; got "
                             f"{', '.join(kinds) or 'none'}")
    if not 0.5 <= level <= 0.99:
        raise ColdscopeError(f"interval level (--level) must be in 0.5-0.99, not {level:g}")
    data = _training(training)
    return StartupModel(formulas=formulas, kinds=tuple(kinds), level=level).fit(
        list(data.observations), data.environment, data.settings, source=data.source)


def predict(startup_model: StartupModel | PathArg, model: ModelFeatures | PathArg, *,
            capture_sizes: int | None = None, compile_cache: PathArg | None = None,
            storage_bandwidth: float | None = None,
            page_cache: Literal["hot", "cold"] | None = None) -> Prediction:
    """The start-up of ``model`` predicted per stage, with intervals and the warnings that
    say where the prediction leaves its training data (``Prediction.to_dict()`` is what
    ``coldscope predict --json`` prints).

    ``startup_model``: a ``StartupModel`` (``fit``, ``calibrate``) or its JSON file. ``model``:
    its ``ModelFeatures``, or a model directory, ``config.json``, safetensors index or features
    JSON, read without loading weights. ``compile_cache``: this model's compile cache
    directory, whose size becomes the compiled graph size. ``capture_sizes``: CUDA-graph
    capture sizes (default: the training runs'). ``storage_bandwidth`` (bytes/s) and
    ``page_cache``: predict model loading for other storage than the model was measured on.
    """
    from coldscope.prediction.features import ModelFeatures
    from coldscope.prediction.startup_model import StartupModel, features_of
    if page_cache not in (None, "hot", "cold"):
        raise ColdscopeError(f"page cache must be hot or cold, not {page_cache!r}")
    fitted = startup_model if isinstance(startup_model, StartupModel) \
        else StartupModel.load(os.fspath(startup_model))
    features = features_of(model if isinstance(model, ModelFeatures) else os.fspath(model),
                           None if compile_cache is None else os.fspath(compile_cache))
    return fitted.predict(features, capture_sizes=capture_sizes,
                          storage_bandwidth=storage_bandwidth, page_cache=page_cache)


def calibrate(startup_model: StartupModel | PathArg, training: TrainingSet | Iterable[Run], *,
              models: Sequence[str] | None = None) -> StartupModel:
    """``startup_model`` moved to a new machine from a few start-ups measured there
    (``coldscope.prediction.calibrate``): each stage's formula is kept and scaled (or shifted)
    by what the new machine's start-ups show, so two models measured there stand in for a
    whole new training set.

    ``startup_model``: the base model (a ``StartupModel`` or its JSON file; not one already
    calibrated). ``training``: the new machine's start-ups, as for ``fit``. ``models``: which
    of their models to calibrate on (default: all). Returns a new ``StartupModel``; its
    ``file_.calibration`` says per stage what was transferred and how far the models agree.
    """
    from coldscope.prediction.calibrate import calibrate as calibrate_file
    from coldscope.prediction.startup_model import StartupModel
    base = startup_model if isinstance(startup_model, StartupModel) \
        else StartupModel.load(os.fspath(startup_model))
    file = getattr(base, "file_", None)
    if file is None:
        raise ColdscopeError("the startup model is not fitted; fit or load one first")
    # what the calibrated model records as its base: the file, else the base's training data
    base_source = file.trained_on.source if isinstance(startup_model, StartupModel) \
        else os.fspath(startup_model)
    data = _training(training)
    new = calibrate_file(file, list(data.observations), environment=data.environment,
                         source=data.source, base_source=base_source,
                         models=list(models) if models else None)
    return StartupModel.from_file(new)


def _training(training: TrainingSet | Iterable[Run]) -> TrainingSet:
    from coldscope.prediction.training import TrainingSet, training_from_runs
    return training if isinstance(training, TrainingSet) else training_from_runs(training)


# -- planning -----------------------------------------------------------------------------------


def simulate(request: SimRequest | SimInputs, *,
             progress: Callable[[float], None] | None = None) -> SimResult | SweepResult:
    """Autoscaling with cold starts replayed over a request trace (``coldscope.sim``): time to
    first token, SLA attainment, cold starts, GPU-hours and cost of one policy, or of every
    case of a sweep (then a ``SweepResult``).

    ``request``: a ``SimRequest`` names the trace file, the policy and replica, and where new
    replicas' start-up times come from (a startup model, a plan, the store's runs, a fixed
    time, or the paper's measured spread); every option is checked before the trace is read
    (``coldscope.sim.request.load_inputs``). A caller that holds the data already (a
    ``Trace``, a cold-start distribution) gives ``SimInputs`` instead and no file is read.
    ``progress(fraction)`` is told how far the simulation is.
    """
    from coldscope.sim.request import SimInputs, load_inputs, run
    inputs = request if isinstance(request, SimInputs) else load_inputs(request)
    return run(inputs, progress=progress)
