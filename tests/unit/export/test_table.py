"""``coldscope export``: one fixed schema for CSV and Parquet, whatever the runs hold."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from pathlib import Path

import pytest

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.export.table import COLUMNS, SCHEMA, export_runs, schema_markdown
from coldscope.util.errors import ColdscopeError

DOC = Path(__file__).resolve().parents[3] / "docs" / "export.md"


def run(rid: str, ttr: float = 10.0, **over) -> Run:
    stages = dict.fromkeys(BUCKETS)
    stages.update(bootstrap=4.0, model_loading=5.0, unattributed=1.0)
    data = {
        "id": rid, "status": "ok", "cache": "cold", "label": "t",
        "started_at": "2026-11-29T10:00:01.250+00:00", "time_to_ready_s": ttr,
        "first_token_s": ttr + 0.1, "stages": stages,
        "substeps": {"model_loading/weights": 4.5}, "sources": {"bootstrap": "probe"},
        "model": {"path": "/m/tiny", "name": "tiny"},
        "engine": {"name": "vllm", "version": "0.32.0", "compile": True,
                   "enforce_eager": False,
                   "argv": ["python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                            "/m/tiny", "--load-format", "safetensors"],
                   "load_format": "safetensors"},
        "environment": {"cpu_model": "AMD EPYC", "cpu_cores": 2},
        "page_cache": "done: 3 files",
    }
    data.update(over)
    return Run.model_validate(data)


def gpu_run(rid: str) -> Run:
    """A run with everything the CPU runs lack: GPUs, CUDA-graph capture, capture sizes."""
    r = run(rid, 20.0).to_json()
    r["stages"]["cuda_graph_capture"] = 3.0
    r["environment"]["gpus"] = [{"name": "NVIDIA H200"}]
    r["engine"]["argv"] += ["--cuda-graph-sizes", "1", "2", "4"]
    r["substeps"]["cuda_graph_capture/replay"] = 0.5
    r["storage"] = {"page_cache": "hot", "kind": "nvme", "read_bandwidth_bps": 3.2e9}
    return Run.model_validate(r)


def test_column_names_and_units():
    assert len(set(COLUMNS)) == len(COLUMNS)
    for c in SCHEMA:
        assert "/" not in c.name and re.fullmatch(r"[a-z0-9_]+", c.name)
        if c.kind == "float":  # every float column is a duration in seconds, or says its unit
            assert c.name.endswith(("_s", "_bps")), c.name
    for b in BUCKETS:
        assert f"{b}_s" in COLUMNS
    for cfg in ("argv", "load_format", "mode", "capture_sizes", "gpu_name", "machine",
                "cache", "page_cache", "storage_kind", "flags"):
        assert cfg in COLUMNS


def test_parquet_schema_is_the_same_before_and_after_a_gpu_run(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    export_runs([run("c1"), run("c2")], tmp_path / "cpu.parquet")
    export_runs([run("c1"), run("c2"), gpu_run("g1")], tmp_path / "all.parquet")
    cpu, both = pq.read_table(tmp_path / "cpu.parquet"), pq.read_table(tmp_path / "all.parquet")
    assert cpu.schema.equals(both.schema)
    assert list(cpu.schema.names) == list(COLUMNS)
    assert cpu.schema.field("cuda_graph_capture_s").type == pa.float64()  # all empty, typed
    assert cpu.column("cuda_graph_capture_s").null_count == 2
    assert cpu.schema.field("started_at").type == pa.timestamp("us", tz="UTC")
    assert cpu.schema.field("capture_sizes").type == pa.int64()
    assert cpu.schema.field("compile").type == pa.bool_()
    row = both.to_pylist()[2]
    assert row["cuda_graph_capture_s"] == 3.0 and row["capture_sizes"] == 3
    assert row["gpu_name"] == "NVIDIA H200" and row["gpu_count"] == 1
    assert row["storage_kind"] == "nvme" and row["storage_read_bandwidth_bps"] == 3.2e9
    assert json.loads(row["substeps_json"]) == {"cuda_graph_capture/replay": 0.5,
                                                "model_loading/weights": 4.5}
    assert row["started_at"] == dt.datetime(2026, 11, 29, 10, 0, 1, 250000, tzinfo=dt.UTC)
    pa.concat_tables([cpu, both])  # same schema: files concatenate


def test_csv_has_the_parquet_columns_and_typed_text(tmp_path):
    export_runs([run("c1"), gpu_run("g1")], tmp_path / "runs.csv")
    rows = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert list(rows[0]) == list(COLUMNS)
    assert rows[0]["started_at"] == "2026-11-29T10:00:01.250+00:00"
    assert rows[0]["time_to_ready_s"] == "10.0" and rows[0]["cuda_graph_capture_s"] == ""
    assert rows[0]["compile"] == "true" and rows[0]["enforce_eager"] == "false"
    assert rows[0]["mode"] == "compiled" and rows[0]["load_format"] == "safetensors"
    assert rows[0]["weights"] == "page cache dropped"
    assert "--load-format safetensors" in rows[0]["argv"]
    assert rows[1]["capture_sizes"] == "3"
    empty = tmp_path / "none.csv"
    assert export_runs([], empty) == 0
    assert empty.read_text().strip().split(",") == list(COLUMNS)
    with pytest.raises(ColdscopeError, match="unknown export format"):
        export_runs([run("c1")], tmp_path / "runs.xlsx")


def test_cli_filters_like_report(tmp_path, capsys):
    from coldscope.cli.main import main
    from coldscope.store.db import Store
    store = str(tmp_path / "s.db")
    with Store(store) as s:
        s.add_run(run("20261129T100001-aaaa01"))
        s.add_run(run("20261129T100002-bbbb02", cache="warm"))
        s.add_run(run("20261129T100003-cccc03", status="failed", reason="boom",
                      time_to_ready_s=None, model={"name": "other", "path": "/m/other"}))
    out = tmp_path / "x.csv"

    def ids(*args) -> list[str]:
        assert main(["export", "-o", str(out), "--store", store, *args]) == 0
        return [r["id"][-6:] for r in csv.DictReader(out.open())]

    assert ids() == ["aaaa01", "bbbb02", "cccc03"]
    assert ids("--runs", "warm") == ["bbbb02"]
    assert ids("--runs", "cold", "--model", "tiny") == ["aaaa01"]
    assert ids("--model", "/m/other") == ["cccc03"]
    assert ids("--status", "ok") == ["aaaa01", "bbbb02"]
    assert ids("--runs", "20261129T100002") == ["bbbb02"]
    capsys.readouterr()
    assert main(["export", "-o", str(out), "--store", store, "--model", "nope"]) == 2
    assert "no runs match --model nope" in capsys.readouterr().err


def test_schema_is_documented():
    """docs/export.md carries the table ``schema_markdown()`` prints, verbatim."""
    assert schema_markdown() in DOC.read_text()
