"""Running cells on this machine: shared by the local executor and by each Ray task.

The unit of work is a *wave*: the cells started at the same time (one cell unless
``--concurrency`` asks for more). A warm cell whose warm cache is still empty is preceded by a
priming run (stored too, role ``prime``, counted as cold by the runner), so every measured
warm run really starts from filled caches.

A driver killed with SIGKILL cannot stop the engine it started (the engine runs in its own
session). So before each run a marker naming the run and its owner process is written to
``STATE/inflight/``; the marker is removed when the run has ended, and the next executor to
start on the machine kills the engines of markers whose owner is dead (``reap``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path

import psutil

from coldscope.campaign.matrix import Cell
from coldscope.campaign.spec import CampaignSpec
from coldscope.core.records import EngineInfo, ModelRef, Run
from coldscope.launch.runner import (
    Evidence,
    RunConfig,
    RunInterrupted,
    kill_run,
    needs_priming,
    new_run_id,
    run_once,
)
from coldscope.util.errors import ColdscopeError

OnLaunch = Callable[[Cell, str, str, int], None]  # cell, run id, role, port
OnRecord = Callable[[Cell, Run, Evidence], None]  # cell, run, evidence
OnStage = Callable[[str, str, float], None]  # run id, stage or sub-step, seconds since launch


def _live_stages(on_stage: OnStage | None, run_id: str) -> Callable[[str, float], None] | None:
    """``run_once``'s live-stage hook for this run: reports the run id with each stage."""
    if on_stage is None:
        return None
    return lambda stage, seconds: on_stage(run_id, stage, seconds)

PRIME = "prime"
MEASURE = "measure"


def state_dir(spec: CampaignSpec, base: Path) -> Path:
    """Where a campaign keeps its in-flight markers on a machine."""
    return (base / ".coldscope" / "campaigns" / spec.name).resolve()


#: vLLM puts IPC sockets in TMPDIR (the run's ``CACHE_ROOT/cold/RUN_ID/tmp``) named by a uuid;
#: a Unix socket path must fit in 107 bytes, so CACHE_ROOT must leave room for the rest.
SOCKET_PATH_MAX = 107
_TMP_SUFFIX = len("/cold/20260101T000000-abcdef/tmp/") + 36


def cache_root(spec: CampaignSpec, base: Path) -> Path:
    """Where runs keep their caches: the file's ``cache_root``, else ``.coldscope/caches``
    (the one ``coldscope profile`` uses; a short path, see ``cache_root_warning``)."""
    return (base / (spec.cache_root or ".coldscope/caches")).resolve()


def cache_root_warning(root: Path) -> str | None:
    """A warning when sockets under this cache root would exceed the Unix path limit (vLLM
    then fails at start-up with ``ipc path ... is longer than 107 characters``)."""
    length = len(str(root)) + _TMP_SUFFIX
    if length <= SOCKET_PATH_MAX:
        return None
    return (f"warning: socket paths under cache root {root} reach {length} characters, more "
            f"than the {SOCKET_PATH_MAX} Unix allows; vLLM will fail to start: set a shorter "
            "cache_root in the campaign file")


def run_config(cell: Cell, spec: CampaignSpec, root: Path, port: int) -> RunConfig:
    """The runner's config for one cell in the slot that listens on ``port``."""
    return RunConfig(
        command=cell.argv(port), cache=cell.cache, repeat=1, timeout=spec.timeout,
        ready_pattern=spec.ready_pattern, first_request=spec.first_request,
        request_timeout=spec.request_timeout, probe=spec.probe, spans=spec.spans,
        drop_page_cache=spec.drop_page_cache, cache_root=root, label=spec.name,
        env=dict(cell.env), shutdown_grace=spec.shutdown_grace, origin="campaign",
        standby=next((e.standby for e in spec.engines if e.name == cell.engine), None),
        standby_dir=Path(spec.standby_dir),
    )


# -- one driver per campaign and store ---------------------------------------------------------


@contextmanager
def campaign_lock(spec: CampaignSpec, store_path: Path) -> Iterator[Path]:
    """Hold the lock of campaign ``spec.name`` on the store at ``store_path`` while it runs.

    Two drivers of one campaign on one store would both see the same cells missing and measure
    each twice (and their engines would fight for ports and cores). The lock is an exclusive
    ``flock`` on a file beside the store, named after the campaign (beside the store, not in
    the state directory under the working directory, so drivers started from two directories
    still exclude each other), and the same campaign may still run against another store. The
    kernel drops the lock when the driver exits, however it dies, so a killed driver never
    leaves a stale lock. A second driver gets a one-line error naming the holder.
    """
    import fcntl
    import hashlib

    store_path = Path(store_path).resolve()
    key = hashlib.sha256(spec.name.encode()).hexdigest()[:12]
    path = store_path.parent / f".{store_path.name}.campaign-{key}.lock"
    from coldscope.util.safeio import open_lock
    fd = open_lock(path, "campaign lock file")  # a regular file only: never a FIFO or a link
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            raise ColdscopeError(
                f"campaign {spec.name!r} is already running on {store_path} ({holder}); "
                "wait for it to finish, or stop it, then run again with --resume") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


# -- in-flight markers -----------------------------------------------------------------------


def _owner() -> dict[str, float]:
    me = psutil.Process()
    return {"pid": me.pid, "created": me.create_time()}


def _alive(owner: dict[str, float]) -> bool:
    """Whether the process ``_owner`` described (read back from JSON) still runs."""
    try:
        created: float = psutil.Process(owner["pid"]).create_time()
        return abs(created - owner["created"]) < 1e-3
    except (psutil.Error, KeyError, TypeError):
        return False


def mark(state: Path, run_id: str) -> Path:
    path = state / "inflight" / run_id
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_owner()))
    return path


def reap(state: Path, grace: float = 2.0) -> list[str]:
    """Kill the engines of runs whose owner died (a SIGKILLed driver or a crashed Ray worker);
    returns their run ids. Runs of live owners — a sibling slot, another task — are left
    alone."""
    reaped = []
    for path in sorted((state / "inflight").glob("*")):
        try:
            owner = json.loads(path.read_text())
        except (OSError, ValueError):
            owner = {}
        if _alive(owner):
            continue
        kill_run(None, path.name, grace)
        path.unlink(missing_ok=True)
        reaped.append(path.name)
    return reaped


# -- models ----------------------------------------------------------------------------------


def ensure_models(cells: list[Cell], on_make: Callable[[str, str], None] | None = None) -> None:
    """Generate every shape the cells need that is not on disk yet; check the given paths."""
    seen: set[str] = set()
    for cell in cells:
        if cell.model_path in seen:
            continue
        seen.add(cell.model_path)
        path = Path(cell.model_path)
        if cell.shape is None:
            if not path.exists():
                raise ColdscopeError(f"model {cell.model}: {path} does not exist")
            continue
        if (path / "config.json").exists():
            continue
        if on_make:
            on_make(cell.model, str(path))
        from transformers.utils import logging as hf_logging

        from coldscope.synth.tiny_model import make_model
        hf_logging.disable_progress_bar()  # its bars would tear the campaign's progress line
        make_model(cell.shape, path)


def ensure_releases(cells: list[Cell], on_make: Callable[[str], None] | None = None) -> None:
    """Make (or reuse) the environment of every release the cells start from, on this node,
    before any start-up; a release that cannot be installed stops the campaign with pip's
    reason."""
    from coldscope.launch.envs import ensure, parse_spec
    seen: set[tuple[str, str]] = set()
    for cell in cells:
        if cell.release is None or cell.envs_dir is None or \
                (cell.release, cell.envs_dir) in seen:
            continue
        seen.add((cell.release, cell.envs_dir))
        if on_make:
            on_make(cell.release)
        ensure(parse_spec(cell.release), Path(cell.envs_dir))


# -- running ---------------------------------------------------------------------------------


def failed_record(cell: Cell, reason: str, *, role: str = MEASURE,
                  wave: Sequence[Cell] = ()) -> Run:
    """A failed run for a cell whose executor never returned one (its Ray node or worker was
    lost, or the task raised); times unknown."""
    from coldscope.engines import resolve
    described = resolve(cell.command).describe(cell.command)
    return Run(
        id=new_run_id(), status="failed", reason=reason, cache=cell.cache,
        cache_requested=cell.cache, label=cell.campaign, origin="campaign",
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        engine=EngineInfo(name=None, argv=list(cell.command), model=cell.model_path,
                          enforce_eager=described.get("enforce_eager"),
                          load_format=described.get("load_format")),
        model=ModelRef(path=cell.model_path, name=cell.model),
        campaign=cell.tag(role=role, started_with=[c.id for c in wave if c.id != cell.id]),
    )


def _annotate(run: Run, cell: Cell, role: str, slot: int, port: int,
              wave: list[Cell]) -> Run:
    return run.evolve(origin="campaign", campaign=cell.tag(
        role=role, slot=slot, port=port, host=socket.gethostname(),
        started_with=[c.id for c in wave if c.id != cell.id]))


def _run(cell: Cell, config: RunConfig, state: Path, role: str, slot: int, port: int,
         wave: list[Cell], on_launch: OnLaunch | None,
         on_line: Callable[[str], None] | None = None,
         on_stage: OnStage | None = None) -> tuple[Run, Evidence]:
    run_id = new_run_id()
    marker = mark(state, run_id)
    if on_launch:
        on_launch(cell, run_id, role, port)
    try:
        run, evidence = run_once(config, run_id=run_id, on_line=on_line,
                                 on_stage=_live_stages(on_stage, run_id))
    except RunInterrupted as stop:
        stop.record = _annotate(stop.record, cell, role, slot, port, wave)
        raise
    finally:
        marker.unlink(missing_ok=True)
    return _annotate(run, cell, role, slot, port, wave), evidence


def run_wave(wave: list[Cell], spec: CampaignSpec, base: Path, *,
             on_launch: OnLaunch | None = None, on_record: OnRecord | None = None,
             on_line: Callable[[str], None] | None = None,
             on_stage: OnStage | None = None) -> list[tuple[Run, Evidence]]:
    """Run the cells of one wave, slot ``i`` on port ``spec.port + i``; every run (priming
    runs included) is passed to ``on_record`` as soon as it ends, in this thread, and returned.

    One cell: prime if needed, then measure. Several: prime sequentially, then start all
    measured runs at once. Ctrl-C stops every engine of the wave, hands the interrupted runs to
    ``on_record`` as failed ("interrupted"), and raises ``KeyboardInterrupt``.
    """
    state = state_dir(spec, base)
    root = cache_root(spec, base)
    out: list[tuple[Run, Evidence]] = []

    def emit(cell: Cell, run: Run, evidence: Evidence) -> None:
        out.append((run, evidence))
        if on_record:
            on_record(cell, run, evidence)

    configs = [run_config(c, spec, root, spec.port + i) for i, c in enumerate(wave)]
    for i, (cell, config) in enumerate(zip(wave, configs, strict=True)):
        if needs_priming(config):
            try:
                emit(cell, *_run(cell, config, state, PRIME, i, spec.port + i, wave, on_launch,
                                 on_line if len(wave) == 1 else None, on_stage))
            except RunInterrupted as stop:
                emit(cell, stop.record, stop.evidence)
                raise
    if len(wave) == 1:
        try:
            emit(wave[0], *_run(wave[0], configs[0], state, MEASURE, 0, spec.port, wave,
                                on_launch, on_line, on_stage))
        except RunInterrupted as stop:
            emit(wave[0], stop.record, stop.evidence)
            raise
        return out
    _run_together(wave, configs, spec, state, on_launch, emit, on_stage)
    return out


def _run_together(wave: list[Cell], configs: list[RunConfig], spec: CampaignSpec, state: Path,
                  on_launch: OnLaunch | None, emit: OnRecord,
                  on_stage: OnStage | None = None) -> None:
    """Start every cell of the wave at once (one thread each) and wait for all."""
    lock = threading.Lock()
    live: set[str] = set()

    def launched(cell: Cell, run_id: str, role: str, port: int) -> None:
        with lock:
            live.add(run_id)
        if on_launch:
            on_launch(cell, run_id, role, port)

    start = threading.Barrier(len(wave))

    def one(i: int) -> tuple[Run, Evidence]:
        start.wait()  # launch together: the point of a contention study
        return _run(wave[i], configs[i], state, MEASURE, i, spec.port + i, wave, launched,
                    on_stage=on_stage)

    pool = ThreadPoolExecutor(max_workers=len(wave), thread_name_prefix="coldscope-slot")
    futures = {pool.submit(one, i): wave[i] for i in range(len(wave))}
    interrupted = False
    try:
        pending = set(futures)
        while pending:
            try:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                interrupted = True
                with lock:
                    ids = list(live)
                for run_id in ids:  # the slots' run_once then see their engine exit
                    kill_run(None, run_id, spec.shutdown_grace)
                continue
            for fut in done:
                run, evidence = fut.result()
                if interrupted and run.status == "failed":
                    run = run.evolve(reason="interrupted")
                emit(futures[fut], run, evidence)
    finally:
        pool.shutdown(wait=True)
    if interrupted:
        raise KeyboardInterrupt
