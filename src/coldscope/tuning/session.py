"""A tune session: the search driven by real start-ups, stored and resumable.

The session lives in ``<store dir>/tune/<id>/``: ``session.json`` (the command, the options,
the catalogue read from the engine, and every finished start-up's measurement, written after
each one) and ``caches/<cache key>/`` (the caches the last start-up of each configuration left,
what a seeded trial starts from and what ``coldscope bundle`` packs). Every start-up is also a
stored run, linked to the session (``origin="tune"``, membership kind ``tune``).

Ctrl-C stops the engine, stores the interrupted run as failed and leaves ``session.json`` with
every finished start-up; kill -9 leaves the same file (the in-flight engine is found by its run
marker and stopped on resume). ``--resume`` replays the stored measurements through the
deterministic search and runs only what is missing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coldscope.engines.knob import ALL_CACHES, Knob, apply_all
from coldscope.tuning.search import Measurement, Outcome, Search, TrialRequest
from coldscope.util.errors import ColdscopeError

SESSION_FILE = "session.json"


class SessionSpec(BaseModel):
    """What a session was asked to do; ``--resume`` reads it back."""

    model_config = ConfigDict(extra="forbid")

    id: str
    created_at: str
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    budget: int
    max_throughput_loss: float | None = None
    allow_output_change: bool = False
    timeout: float = 900.0
    knobs: list[Knob]
    capabilities: dict[str, Any] = Field(default_factory=dict)
    bundle_key: str | None = Field(None, description="cache key a --bundle seeded")
    done: list[dict] = Field(default_factory=list, description="[{request, measurement}]")
    inflight: dict | None = Field(None, description="the start-up running now: request, run id")
    outcome: dict | None = None


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


class Replay:
    """``measure`` for the search: stored measurements first (checked against the request the
    search makes now), then ``execute`` for the rest, saving after each start-up."""

    def __init__(self, spec: SessionSpec, directory: Path,
                 execute: Callable[[TrialRequest], Measurement],
                 on_measured: Callable[[TrialRequest, Measurement, bool], None] | None = None):
        self.spec = spec
        self.directory = directory
        self.execute = execute
        self.on_measured = on_measured

    def __call__(self, req: TrialRequest) -> Measurement:
        if req.index < len(self.spec.done):
            stored = self.spec.done[req.index]
            if stored["request"] != req.model_dump(mode="json"):
                raise ColdscopeError(
                    f"tune session {self.spec.id} cannot resume: start-up {req.index} differs "
                    "from the stored one (the catalogue or the code changed); start a new session")
            m = Measurement.model_validate(stored["measurement"])
            if self.on_measured:
                self.on_measured(req, m, True)
            return m
        self.spec.inflight = {"request": req.model_dump(mode="json")}
        save(self.spec, self.directory)
        m = self.execute(req)
        self.spec.done.append({"request": req.model_dump(mode="json"),
                               "measurement": m.model_dump(mode="json")})
        self.spec.inflight = None
        save(self.spec, self.directory)
        if self.on_measured:
            self.on_measured(req, m, False)
        return m


def run_search(spec: SessionSpec, directory: Path,
               execute: Callable[[TrialRequest], Measurement],
               on_measured: Callable[[TrialRequest, Measurement, bool], None] | None = None,
               ) -> Outcome:
    """Drive (or resume) the search of ``spec``; the outcome is saved with the session."""
    search = Search(spec.knobs, Replay(spec, directory, execute, on_measured),
                    budget=spec.budget, max_throughput_loss=spec.max_throughput_loss,
                    allow_output_change=spec.allow_output_change)
    if spec.bundle_key:
        search.primed.add(spec.bundle_key)
    outcome = search.run()
    spec.outcome = outcome.model_dump(mode="json")
    save(spec, directory)
    return outcome


# -- caches ------------------------------------------------------------------------------------


def archive_dir(directory: Path, key: str) -> Path:
    return directory / "caches" / key


def seed_paths(knobs: list[Knob]) -> list[str]:
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


# -- the real executor ---------------------------------------------------------------------------


class EngineExecutor:
    """Starts the engine for a trial through the runner, verifies it while it is up, stores the
    run linked to the session, and keeps the caches it left."""

    def __init__(self, spec: SessionSpec, directory: Path, store, *, quiet: bool = True,
                 on_line: Callable[[str], None] | None = None,
                 verify: Callable[[str, str, Callable[[], float]], dict] | None = None,
                 on_start: Callable[[Any], None] | None = None,
                 on_stage: Callable[[str, float], None] | None = None) -> None:
        from coldscope.tuning.verify import verify as default_verify
        self.spec = spec
        self.directory = directory
        self.store = store
        self.on_line = on_line
        self.on_start = on_start  # live progress: the run (status running) about to start
        self.on_stage = on_stage  # live progress: (stage, seconds since launch)
        self.verify = verify or default_verify
        self.by_name = {k.name: k for k in spec.knobs}

    def config_for(self, req: TrialRequest):
        from coldscope.launch.runner import RunConfig
        knobs = [self.by_name[n] for n in req.knobs]
        argv, env = apply_all(knobs, list(self.spec.command), dict(self.spec.env))
        extra = {"origin": "tune"} if "origin" in RunConfig.model_fields else {}
        return RunConfig(command=argv, env=env, cache="warm" if req.seeded else "cold",
                         timeout=self.spec.timeout, keep_cold_caches=True,
                         cache_root=self.directory / "run-caches",
                         label=f"tune:{self.spec.id}", **extra)

    def __call__(self, req: TrialRequest) -> Measurement:
        from coldscope.analysis.findings import findings_for_run
        from coldscope.core.records import Membership
        from coldscope.launch import runner
        config = self.config_for(req)
        run_id = runner.new_run_id()
        dirs = runner.cache_dirs(config, run_id)
        if req.seeded:
            knobs = [self.by_name[n] for n in req.knobs]
            copy_seed(archive_dir(self.directory, req.cache_key), dirs.root, seed_paths(knobs))
            (dirs.root / ".filled").touch()
        self.spec.inflight = {"request": req.model_dump(mode="json"), "run_id": run_id}
        save(self.spec, self.directory)
        interrupted = None
        try:
            run, evidence = runner.run_once(config, run_id=run_id, on_line=self.on_line,
                                            after_ready=self.verify, on_start=self.on_start,
                                            on_stage=self.on_stage)
        except runner.RunInterrupted as stop:
            run, evidence, interrupted = stop.record, stop.evidence, stop
        membership = Membership(kind="tune", name=self.spec.id, role=req.role, trial=req.index,
                                change=req.change, flags="+".join(req.knobs) or "default",
                                cache="seeded" if req.seeded else "cold")
        run = run.evolve(origin="tune", campaign=membership)
        findings = findings_for_run(run, evidence.get("log") or [])
        run = run.evolve(findings=findings)
        self.store.add_run(run, evidence)
        keep_caches(dirs.root, self.directory, req.cache_key)
        if interrupted is not None:
            raise interrupted
        ver = run.verification or {}
        return Measurement(
            ok=run.status == "ok", run_id=run.id, reason=run.reason,
            time_to_ready_s=run.time_to_ready_s, stages=dict(run.stages),
            findings=[{"id": f.id, "seconds_at_stake": f.seconds_at_stake} for f in findings],
            throughput=ver.get("throughput"), greedy=ver.get("greedy"),
            rounds=[float(x) for x in ver.get("rounds_tokens_per_s") or [] if x],
        )


def reap_inflight(spec: SessionSpec) -> str | None:
    """Stop the engine of a start-up a killed tune left running (found by its run marker)."""
    run_id = (spec.inflight or {}).get("run_id")
    if run_id:
        from coldscope.launch.runner import kill_run
        kill_run(None, run_id, 2.0)
    return run_id
