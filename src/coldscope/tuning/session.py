"""A tune session: the search driven by real start-ups, stored and resumable.

The session lives in ``<store dir>/tune/<id>/``: ``session.json`` (``SessionSpec``: the
command, the options, the catalogue read from the engine, and every finished start-up's
measurement, written after each one) and ``caches/<cache key>/`` (the caches the last start-up
of each configuration left, what a seeded trial starts from and what ``coldscope bundle``
packs). Every start-up is also a stored run, linked to the session (``origin="tune"``,
membership kind ``tune``).

``SessionSpec`` is the record of ``session.json``, frozen; while the search runs,
``ActiveSession`` holds the newest one (each change a validated copy) and writes it after every
change. ``coldscope.tuning.tune`` opens sessions and runs them (the library's entry points).

A configuration with a launcher knob (``Knob.launcher``) starts its engine through the
session's own standby launcher (``SessionLauncher``: one per session, for its command, named
after the session and kept under its directory, so it shares nothing with the user's
launchers), started before the first start-up that needs it and stopped when the session ends,
fails or is interrupted. A prime (the cold start-up that leaves a configuration's caches, as a
new node's) never goes through it: a new node has no launcher that has imported yet.

Ctrl-C stops the engine, stores the interrupted run as failed and leaves ``session.json`` with
every finished start-up; kill -9 leaves the same file (the in-flight engine is found by its run
marker and stopped on resume, and so is the session's launcher, ``reap_launcher``). Resuming
replays the stored measurements through the deterministic search and runs only what is
missing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
)

from coldscope.engines.knobs import ALL_CACHES, Knob, apply_all
from coldscope.tuning.search import (
    FindingCost,
    Measurement,
    Outcome,
    Search,
    TrialRequest,
    TuneRecord,
)
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from coldscope.core.records import Run
    from coldscope.launch.runner import RunConfig
    from coldscope.launch.standby import Standby
    from coldscope.store.db import Store

SESSION_FILE: Final = "session.json"
#: Engine start-ups a session spends unless told otherwise (``tune --budget``).
DEFAULT_BUDGET: Final = 16
#: Seconds from launch to ready before a start-up is failed, unless told otherwise.
DEFAULT_TIMEOUT_S: Final = 900.0

#: ``on_measured(request, measurement, replayed)``: a start-up finished (``replayed``: read
#: back from the session file on resume, not run again).
OnMeasured = Callable[[TrialRequest, Measurement, bool], None]


class Trial(TuneRecord):
    """A finished start-up of the session: what the search asked for and what it measured."""

    request: TrialRequest
    measurement: Measurement


class Inflight(TuneRecord):
    """The start-up running now: its request and, once the engine is about to launch, the run
    id whose marker finds the engine again after a kill -9."""

    request: TrialRequest
    run_id: str | None = None

    @model_serializer(mode="wrap")
    def _without_unknown_run(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # the session file has no "run_id" before the engine launches, as it always had
        data: dict[str, Any] = handler(self)
        if data.get("run_id") is None:
            data.pop("run_id", None)
        return data


class SessionSpec(TuneRecord):
    """What a session was asked to do and what it has measured so far: the ``session.json``
    record, read back on resume. ``capabilities`` is what the engine's adapter reported with
    its catalogue (``Engine.tune_catalogue``: version, torch, python, ...)."""

    id: str
    created_at: str
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    budget: int
    max_throughput_loss: float | None = None
    allow_output_change: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    cold_evict: bool = Field(
        False, description="evict the model's and the engine's Python files from the page "
                           "cache before each cold start-up (a new node's state); a session "
                           "file without it ran before tune evicted anything")
    knobs: list[Knob]
    capabilities: dict[str, Any] = Field(default_factory=dict)
    bundle_key: str | None = Field(None, description="cache key a --bundle seeded")
    done: list[Trial] = Field(default_factory=list, description="every finished start-up")
    inflight: Inflight | None = Field(None, description="the start-up running now")
    outcome: Outcome | None = None

    @field_validator("outcome", mode="before")
    @classmethod
    def _outcome_of_an_older_tune(cls, value: Any) -> Any:
        """An outcome this version cannot read (a session file of an older tune) is as good as
        none: resuming derives it again from the measurements, and the report reads the kept
        changes from the runs."""
        if value is None or isinstance(value, Outcome):
            return value
        try:
            return Outcome.model_validate(value)
        except ValidationError:
            return None


def new_session_id() -> str:
    return "tune-" + dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + \
        secrets.token_hex(2)


def sessions_dir(store_path: Path) -> Path:
    return Path(store_path).resolve().parent / "tune"


def save(spec: SessionSpec, directory: Path) -> None:
    """Write ``session.json`` atomically (a kill -9 leaves the old or the new file, never half)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (SESSION_FILE + ".tmp")
    tmp.write_text(json.dumps(spec.model_dump(mode="json"), indent=1))
    os.replace(tmp, directory / SESSION_FILE)


def load(directory: Path) -> SessionSpec:
    from coldscope.util.safeio import read_text
    path = directory / SESSION_FILE
    if not path.exists():
        raise ColdscopeError(f"no tune session in {directory}")
    text = read_text(path, what="tune session file")  # a regular file, size-bounded
    try:
        return SessionSpec.model_validate_json(text)
    except ValueError as exc:
        raise ColdscopeError(f"{path} is not a tune session file ({exc.__class__.__name__})") \
            from None


def find_session(store_path: Path, session: str | None) -> Path:
    """The directory of session ``session`` (an id or a path), or of the newest one."""
    if session and Path(session).is_dir():
        return Path(session)
    root = sessions_dir(store_path)
    if session:
        d = root / session
        if not (d / SESSION_FILE).exists():
            raise ColdscopeError(f"no tune session {session!r} in {root}")
        return d
    found = sorted(p.parent for p in root.glob(f"*/{SESSION_FILE}"))
    if not found:
        raise ColdscopeError(f"no tune session in {root} (run `coldscope tune` first)")
    return found[-1]


# -- running the search ------------------------------------------------------------------------


class ActiveSession:
    """A session while its search runs: ``spec`` is the newest record (frozen; each change
    makes a validated copy) and is written to ``directory`` after every change, so an
    interruption at any point leaves a file that resumes."""

    def __init__(self, spec: SessionSpec, directory: Path) -> None:
        self.spec = spec
        self.directory = directory

    def _write(self, **changes: Any) -> None:
        self.spec = self.spec.evolve(**changes)
        save(self.spec, self.directory)

    def starting(self, req: TrialRequest, run_id: str | None = None) -> None:
        """Start-up ``req`` is about to run (as run ``run_id``, once the engine launches)."""
        self._write(inflight=Inflight(request=req, run_id=run_id))

    def measured(self, req: TrialRequest, m: Measurement) -> None:
        """Start-up ``req`` finished with ``m``."""
        self._write(done=[*self.spec.done, Trial(request=req, measurement=m)], inflight=None)

    def finished(self, outcome: Outcome) -> None:
        self._write(outcome=outcome)


class Replay:
    """``measure`` for the search: stored measurements first (checked against the request the
    search makes now), then ``execute`` for the rest, recorded after each start-up."""

    def __init__(self, active: ActiveSession, execute: Callable[[TrialRequest], Measurement],
                 on_measured: OnMeasured | None = None) -> None:
        self.active = active
        self.execute = execute
        self.on_measured = on_measured

    def __call__(self, req: TrialRequest) -> Measurement:
        spec = self.active.spec
        if req.index < len(spec.done):
            stored = spec.done[req.index]
            if stored.request != req:
                raise ColdscopeError(
                    f"tune session {spec.id} cannot resume: start-up {req.index} differs "
                    "from the stored one (the catalogue or the code changed); start a new session")
            if self.on_measured:
                self.on_measured(req, stored.measurement, True)
            return stored.measurement
        self.active.starting(req)
        m = self.execute(req)
        self.active.measured(req, m)
        if self.on_measured:
            self.on_measured(req, m, False)
        return m


def run_search(active: ActiveSession, execute: Callable[[TrialRequest], Measurement],
               on_measured: OnMeasured | None = None) -> Outcome:
    """Drive (or resume) the search of ``active``'s session; the outcome is saved with it."""
    spec = active.spec
    search = Search(spec.knobs, Replay(active, execute, on_measured),
                    budget=spec.budget, max_throughput_loss=spec.max_throughput_loss,
                    allow_output_change=spec.allow_output_change)
    if spec.bundle_key:
        search.primed.add(spec.bundle_key)
    outcome = search.run()
    active.finished(outcome)
    return outcome


# -- caches ------------------------------------------------------------------------------------


def archive_dir(directory: Path, key: str) -> Path:
    return directory / "caches" / key


def seed_paths(knobs: Sequence[Knob]) -> list[str]:
    """The cache sub-directories a configuration's seed knobs need (``*`` = all)."""
    paths: list[str] = []
    for k in knobs:
        for p in k.seed:
            if p == ALL_CACHES:
                return [ALL_CACHES]
            if p not in paths:
                paths.append(p)
    return paths


def copy_seed(src: Path, dest: Path, paths: list[str]) -> None:
    """Copy the seeded caches from an archive into a fresh cache root."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if not src.exists():
        return
    if paths == [ALL_CACHES]:
        shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)
        return
    for rel in paths:
        s = src / rel
        if s.is_dir():
            shutil.copytree(s, dest / rel, dirs_exist_ok=True, symlinks=True)


def keep_caches(root: Path, directory: Path, key: str) -> None:
    """Make ``root`` (a finished start-up's cache root) the archive of ``key``."""
    dest = archive_dir(directory, key)
    if not root.exists():
        return
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(root), str(dest))
    with contextlib.suppress(FileNotFoundError):
        (dest / ".filled").unlink()


# -- the session's standby launcher -------------------------------------------------------------

#: Longest Unix socket path a launcher is given (``sun_path`` is 108 bytes on Linux; the
#: launcher's own check, ``coldscope.launch.standby.start``, refuses more than 100).
_SOCKET_MAX: Final = 100


def launcher_name(spec: SessionSpec) -> str:
    """The name of the session's standby launcher: its session id (as a launcher name)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", spec.id).lstrip("-_.")[:64] or "tune"


def launcher_dir(spec: SessionSpec, directory: Path) -> Path:
    """Where the session's launcher keeps its state, socket and log: ``standby/`` in the
    session's directory, or, when that would make the socket's path too long for a Unix
    socket, a directory of the session's own under the system's temporary directory (named by
    a hash of the session's directory, so a resumed session finds it again)."""
    inside = Path(directory).resolve() / "standby"
    if len(str(inside / f"{launcher_name(spec)}.sock")) <= _SOCKET_MAX:
        return inside
    digest = hashlib.sha256(str(Path(directory).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"coldscope-tune-{digest}"


class SessionLauncher:
    """The session's standby launcher for its command: started by ``ensure`` before the first
    start-up that needs it (not before: a session whose search never tries a launcher knob
    starts none), stopped by ``stop``. A launcher that fails to start is not retried: every
    start-up that needed it fails with the reason."""

    def __init__(self, spec: SessionSpec, directory: Path,
                 on_line: Callable[[str], None] | None = None) -> None:
        self.name = launcher_name(spec)
        self.root = launcher_dir(spec, directory)
        self.directory = directory
        self.command = list(spec.command)
        self.timeout = spec.timeout
        self.on_line = on_line
        self.started: Standby | None = None
        self.failed: str | None = None

    def ensure(self) -> str | None:
        """Have the launcher ready: None when it is, else why it is not (the start-up that
        needed it fails with this reason). A launcher of the session left by an earlier run of
        it that is not ready (gone, refused) is cleared and started again."""
        from coldscope.launch import standby
        if self.failed is not None:
            return self.failed
        found = standby.find(self.name, root=self.root)
        if found is not None and found.status == "ready":
            return None
        if self.on_line is not None:
            self.on_line(f"coldscope: starting the session's standby launcher {self.name} "
                         "(the engine's imports, before the start-up's clock)")
        try:
            if found is not None:
                standby.stop(self.name, root=self.root)
            self.started = standby.start(self.name, self.command, root=self.root,
                                         timeout=self.timeout, die_with_parent=True)
        except ColdscopeError as exc:
            self.failed = f"the session's standby launcher did not start: {exc}"
            return self.failed
        return None

    def stop(self) -> Standby | None:
        """Stop the launcher (and any engine it still runs) if it runs; what was stopped."""
        return stop_launcher(self.name, self.root, self.directory)


def stop_launcher(name: str, root: Path, directory: Path) -> Standby | None:
    """Stop launcher ``name`` under ``root`` and remove its state; the launcher as it was when
    its process still ran, None when there was none running. A launcher kept outside the
    session's ``directory`` (``launcher_dir``) leaves its log there, and its directory goes."""
    from coldscope.launch import standby
    found = standby.find(name, root=root)
    if found is not None:
        with contextlib.suppress(ColdscopeError):
            standby.stop(name, root=root)
    inside = Path(directory).resolve() / "standby"
    if Path(root) != inside and Path(root).is_dir():
        log = Path(root) / f"{name}.log"
        if log.exists():
            inside.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.move(str(log), str(inside / log.name))
        with contextlib.suppress(OSError):
            Path(root).rmdir()  # only when nothing else is left in it
    return found if found is not None and found.status not in ("gone", "stopped") else None


def reap_launcher(spec: SessionSpec, directory: Path) -> Standby | None:
    """Stop the standby launcher a killed tune of this session left running (and the engine
    it may still run) and clear its state; None when none was running. The launcher stops
    itself when its tune is gone (``die_with_parent``): this clears what it left, and stops
    one that was still importing."""
    return stop_launcher(launcher_name(spec), launcher_dir(spec, directory), directory)


# -- the real executor ---------------------------------------------------------------------------

# -- a cold start-up on a new node's page cache -------------------------------------------------

#: What ``Measurement.evicted`` names: the model's files, and the engine's Python (its
#: standard library and site-packages, what its imports read).
EVICT_MODEL: Final = "model"
EVICT_PYTHON: Final = "engine python"

_SYS_PATH = "import json, sys; print(json.dumps(sys.path))"


def python_trees(python: str) -> list[Path]:
    """The directories ``python`` imports from (its ``sys.path`` in isolated mode: standard
    library, site-packages and what their ``.pth`` files add), outermost only; empty when the
    interpreter cannot say within 30 s."""
    try:
        out = subprocess.run([python, "-I", "-c", _SYS_PATH], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        entries = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    dirs = sorted({Path(e).resolve() for e in entries if isinstance(e, str) and e
                   and Path(e).is_dir()}, key=lambda p: (len(p.parts), str(p)))
    trees: list[Path] = []
    for d in dirs:  # a filesystem root is not a tree of the interpreter's
        if len(d.parts) > 1 and not any(d.is_relative_to(t) for t in trees):
            trees.append(d)
    return trees


def evict_python(python: str | None) -> str:
    """Evict the engine's Python (``python_trees``) from the page cache, as a new node has
    it: what was done (``done: ...``), or why not. No fsync: these trees were installed long
    before, and the fsync per file is most of the cost (see ``drop_page_cache``)."""
    from coldscope.launch.runner import drop_page_cache
    if python is None:
        return "not possible: the command's interpreter was not found"
    trees = python_trees(python)
    if not trees:
        return f"not possible: {python} did not list its import directories"
    said = []
    for tree in trees:
        done = drop_page_cache(str(tree), sync=False)
        if not done.startswith("done"):
            return f"{done} ({tree})"
        said.append(f"{tree} ({done.removeprefix('done: fadvise DONTNEED on ')})")
    return "done: fadvise DONTNEED on " + ", ".join(said)


#: ``verify(base url, served model, cpu seconds so far) -> verification``: the checks run while
#: a trial's engine is up (``coldscope.tuning.verify.verify``).
Verify = Callable[[str, str, Callable[[], float]], dict[str, Any]]


class EngineExecutor:
    """Starts the engine for a trial through the runner, verifies it while it is up, stores the
    run linked to the session, and keeps the caches it left. When the session evicts
    (``cold_evict``), a start-up on empty caches first has the engine's Python evicted from the
    page cache (``evict``, given the run's config: ``evict_python`` of its interpreter) and the
    model's files by the runner (``RunConfig.drop_page_cache``), as a new node has them."""

    def __init__(self, active: ActiveSession, store: Store, *,
                 on_line: Callable[[str], None] | None = None, verify: Verify | None = None,
                 on_start: Callable[[Run], None] | None = None,
                 on_stage: Callable[[str, float], None] | None = None,
                 evict: Callable[[RunConfig], str] | None = None) -> None:
        from coldscope.tuning.verify import verify as default_verify
        self.active = active
        self.store = store
        self.on_line = on_line
        self.on_start = on_start  # live progress: the run (status running) about to start
        self.on_stage = on_stage  # live progress: (stage, seconds since launch)
        self.verify: Verify = verify or default_verify
        self.evict: Callable[[RunConfig], str] = evict or self._evict_python
        self.by_name = {k.name: k for k in active.spec.knobs}
        self.launcher = SessionLauncher(active.spec, active.directory, on_line=on_line)

    def config_for(self, req: TrialRequest) -> RunConfig:
        from coldscope.launch.runner import RunConfig
        spec = self.active.spec
        argv, env = apply_all([self.by_name[n] for n in req.knobs], list(spec.command),
                              dict(spec.env))
        standby = {"standby": self.launcher.name, "standby_dir": self.launcher.root} \
            if self.launches(req) else {}
        return RunConfig(command=argv, env=env, cache="warm" if req.seeded else "cold",
                         timeout=spec.timeout, keep_cold_caches=True,
                         drop_page_cache=self.evicts(req),
                         cache_root=self.active.directory / "run-caches",
                         label=f"tune:{spec.id}", origin="tune", **standby)

    def launches(self, req: TrialRequest) -> bool:
        """Whether start-up ``req`` goes through the session's standby launcher: its
        configuration has a launcher knob and it is not a prime (a prime is the configuration's
        cold start-up, a new node's, and a new node has no launcher that has imported yet)."""
        return req.role != "prime" and any(self.by_name[n].launcher for n in req.knobs)

    def close(self) -> None:
        """The session's search ended (finished, failed or interrupted): stop its launcher."""
        self.launcher.stop()

    def evicts(self, req: TrialRequest) -> bool:
        """Whether start-up ``req`` starts on a new node's page cache: every start-up on empty
        caches (the cold default, a prime, a trial on cold caches) when the session evicts, so
        that cold start-ups compared with each other share one state."""
        return self.active.spec.cold_evict and not req.seeded

    def _evict_python(self, config: RunConfig) -> str:
        from coldscope.launch.envs import engine_path, engine_python
        path = config.env.get("PATH") or engine_path()  # the runner's PATH for the command
        return evict_python(engine_python(config.command[0], path))

    def __call__(self, req: TrialRequest) -> Measurement:
        from coldscope.analysis.findings import findings_for_run
        from coldscope.core.records import Membership
        from coldscope.launch import runner
        config = self.config_for(req)
        notes: list[str] = []
        if config.standby is not None:
            before = self.launcher.started
            why = self.launcher.ensure()
            if why is not None:
                return Measurement(ok=False, reason=why)
            ready = self.launcher.started
            if ready is not None and ready is not before:
                took = f" in {ready.import_s:.1f} s" if ready.import_s is not None else ""
                notes.append(
                    f"started the session's standby launcher {ready.name!r} for this start-up: "
                    f"{ready.modules_loaded} modules imported{took} before its launch, not "
                    "counted in its time to ready (a running node's launcher)")
        elif any(self.by_name[n].launcher for n in req.knobs):
            notes.append("not launched through the session's standby launcher: a prime is a "
                         "new node's cold start-up, and a new node has no launcher that has "
                         "imported yet")
        python = self.evict(config) if self.evicts(req) else None
        run_id = runner.new_run_id()
        dirs = runner.cache_dirs(config, run_id)
        directory = self.active.directory
        if req.seeded:
            knobs = [self.by_name[n] for n in req.knobs]
            copy_seed(archive_dir(directory, req.cache_key), dirs.root, seed_paths(knobs))
            (dirs.root / ".filled").touch()
        self.active.starting(req, run_id)
        interrupted = None
        try:
            run, evidence = runner.run_once(config, run_id=run_id, on_line=self.on_line,
                                            after_ready=self.verify, on_start=self.on_start,
                                            on_stage=self.on_stage)
        except runner.RunInterrupted as stop:
            run, evidence, interrupted = stop.record, stop.evidence, stop
        except ColdscopeError as exc:
            if config.standby is None:
                raise
            # the launcher went away between ``ensure`` and the launch: nothing was started
            shutil.rmtree(dirs.root, ignore_errors=True)
            return Measurement(ok=False, reason=f"the session's standby launcher: {exc}")
        membership = Membership(kind="tune", name=self.active.spec.id, role=req.role,
                                trial=req.index, change=req.change,
                                flags="+".join(req.knobs) or "default",
                                cache="seeded" if req.seeded else "cold")
        run = run.evolve(origin="tune", campaign=membership)
        if python is not None:  # the model's eviction is the runner's, in run.page_cache
            notes.append(f"page cache, engine python: {python}")
        if notes:
            run = run.evolve(notes=[*run.notes, *notes])
        findings = findings_for_run(run, evidence.get("log") or [])
        run = run.evolve(findings=findings)
        self.store.add_run(run, evidence)
        keep_caches(dirs.root, directory, req.cache_key)
        if interrupted is not None:
            raise interrupted
        ver = run.verification or {}
        return Measurement(
            ok=run.status == "ok", run_id=run.id, reason=run.reason,
            time_to_ready_s=run.time_to_ready_s, stages=dict(run.stages),
            findings=[FindingCost(id=f.id, seconds_at_stake=f.seconds_at_stake)
                      for f in findings],
            throughput=ver.get("throughput"), greedy=ver.get("greedy"),
            greedy_token_ids=ver.get("greedy_token_ids"),
            rounds=[float(x) for x in ver.get("rounds_tokens_per_s") or [] if x],
            evicted=[what for what, done in ((EVICT_MODEL, run.page_cache or ""),
                                             (EVICT_PYTHON, python or ""))
                     if done.startswith("done")],
        )


def reap_inflight(spec: SessionSpec) -> str | None:
    """Stop the engine of a start-up a killed tune left running (found by its run marker);
    its run id, or None when none was running."""
    run_id = spec.inflight.run_id if spec.inflight is not None else None
    if run_id:
        from coldscope.launch.runner import kill_run
        kill_run(None, run_id, 2.0)
    return run_id
