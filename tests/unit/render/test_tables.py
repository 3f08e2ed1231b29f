"""The terminal renderings of runs, printed on fixed-width consoles and read back as text."""

from __future__ import annotations

import io

from rich.console import Console

from coldscope.core.records import Finding, Run
from coldscope.render.tables import environment_table, runs_table, substep_order, timeline_table


def _print(renderable, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False).print(renderable)
    return out.getvalue()


def _run(rid: str, **over) -> Run:
    data = {"id": rid, "status": "ok", "started_at": "2026-12-01T01:59:57.000+00:00",
            "cache": "cold", "time_to_ready_s": 67.2, "first_token_s": 68.1,
            "model": {"name": "tiny-llama-model", "path": "/m/tiny-llama-model"},
            "label": "campaign-cpu-shapes"}
    data.update(over)
    return Run.model_validate(data)


def test_runs_never_cuts_an_id_in_80_columns():
    runs = [_run("20261201T015957-4ed8a1"), _run("20261201T020112-9f00c2", status="failed",
                                                 reason="engine exited with status 1 early",
                                                 time_to_ready_s=None, first_token_s=None)]
    for width in (80, 60, 100):
        text = _print(runs_table(runs, width=width), width)
        for r in runs:
            assert r.id in text, f"id cut at {width} columns:\n{text}"
        assert "…" not in text
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    text = _print(runs_table(runs, width=80))
    assert "67.20" in text  # time to ready stays when columns give way


def test_runs_shows_every_column_when_there_is_room():
    text = _print(runs_table([_run("20261201T015957-4ed8a1")], width=140), 140)
    for col in ("started", "status", "cache", "model", "ready s", "1st token s"):
        assert col in text
    assert "12-01 01:59" in text and "68.10" in text and "tiny-llama-model" in text


def _overlapping_run() -> Run:
    """Three bootstrap sub-steps: engine_config in the API server (2-5 s) overlaps
    engine_core_start in another process (4-9 s); worker_init (9.5-11 s) overlaps nothing.
    Names in reverse alphabetical order of their start, so sorting by name would be wrong."""
    return _run(
        "r1", time_to_ready_s=12.0,
        stages={"bootstrap": 11.0, "server_ready": 1.0, "unattributed": 0.0},
        substeps={"bootstrap/engine_config": 3.0, "bootstrap/worker_init": 1.5,
                  "bootstrap/engine_core_start": 5.0, "model_loading/weights": 0.5},
        intervals=[
            {"name": "bootstrap/worker_init", "process": "worker", "pid": 3, "start": 9.5,
             "end": 11.0, "source": "probe"},
            {"name": "bootstrap/engine_core_start", "process": "engine_core", "pid": 2,
             "start": 4.0, "end": 9.0, "source": "probe"},
            {"name": "bootstrap/engine_config", "process": "api_server", "pid": 1,
             "start": 2.0, "end": 5.0, "source": "probe"},
            {"name": "bootstrap/engine_config", "process": "api_server", "pid": 1,
             "start": 9.0, "end": 9.5, "source": "log"},  # touches worker_init: no overlap
        ])


def test_substeps_in_time_order_with_overlaps_flagged():
    order = substep_order(_overlapping_run())
    assert [(n, start) for n, _, start, _ in order] == [
        ("bootstrap/engine_config", 2.0), ("bootstrap/engine_core_start", 4.0),
        ("bootstrap/worker_init", 9.5), ("model_loading/weights", None)]
    overlaps = {n: o for n, _, _, o in order}
    assert overlaps == {"bootstrap/engine_config": ["bootstrap/engine_core_start"],
                        "bootstrap/engine_core_start": ["bootstrap/engine_config"],
                        "bootstrap/worker_init": [], "model_loading/weights": []}
    text = _print(timeline_table(_overlapping_run()), 120)
    lines = text.splitlines()
    pos = [next(i for i, ln in enumerate(lines) if f"└ {n}" in ln)
           for n in ("engine_config", "engine_core_start", "worker_init")]
    assert pos == sorted(pos)
    assert "overlaps engine_core_start" in lines[pos[0]]
    assert "overlaps" not in lines[pos[2]]
    assert "do not add up" in " ".join(text.split())


def test_timeline_table_ends_with_the_findings():
    run = _overlapping_run().model_copy(update={"findings": [Finding(
        id="compile-cache-cold", stage="torch_compile", seconds_at_stake=3.5,
        evidence="no cached graph", advice="keep the cache")]})
    text = _print(timeline_table(run), 120)
    assert text.index("time to ready") < text.index("compile-cache-cold")
    assert "3.5" in text and "keep the cache" in text


def test_environment_and_notes():
    run = _run("r2", engine={"name": "vllm", "version": "0.32.0",
                             "argv": ["python", "-m", "vllm.entrypoints.openai.api_server",
                                      "--model", "/m/tiny llama"]},
               environment={"cpu_model": "AMD EPYC 9354", "cpu_cores": 2, "torch": "2.13.0",
                            "python": "3.11.7", "gpus": [], "hostname": "box"},
               cache_requested="warm",
               notes=["warm cache was empty: this run fills it and counts as cold"])
    text = _print(environment_table(run), 120)
    assert "vllm 0.32.0" in text
    assert "torch 2.13.0" in text and "python 3.11.7" in text
    assert "AMD EPYC 9354 (2 cores)" in text
    assert "'/m/tiny llama'" in text  # the command as a shell would take it
    assert "cold (asked for warm)" in text
    assert "this run fills it and counts as cold" in text
    assert "compile key" not in text and "cache held" not in text


def test_environment_shows_the_compile_key_and_what_the_cache_held():
    run = _run("r3", compile_key={"run": "r3", "dirs": ["vllm/torch_compile_cache/ab12"]},
               cache_held=[{"run": "r1", "dirs": ["x"]}, {"run": "r2", "dirs": ["y"]}])
    text = _print(environment_table(run), 120)
    assert "vllm/torch_compile_cache/ab12" in text
    assert "2 earlier run(s), newest r2" in text


def test_show_env_and_runs_through_the_cli(tmp_path, capsys):
    from coldscope.cli.main import main
    from coldscope.store.db import Store
    data = _overlapping_run().to_json()
    data.update(id="20261201T015957-4ed8a1",
                environment={"cpu_model": "AMD EPYC 9354", "cpu_cores": 2, "torch": "2.13.0"},
                notes=["warm cache was empty: this run fills it and counts as cold"])
    run = Run.model_validate(data)
    store = str(tmp_path / "s.db")
    with Store(store) as s:
        s.add_run(run)
    assert main(["show", run.id, "--store", store]) == 0
    plain = capsys.readouterr().out
    assert "overlaps engine_core_start" in plain and "torch 2.13.0" not in plain
    assert main(["show", run.id, "--env", "--store", store]) == 0
    env = capsys.readouterr().out
    assert "torch 2.13.0" in env and "counts as cold" in env
    assert main(["runs", "--store", store]) == 0
    assert run.id in capsys.readouterr().out


def test_comparison_table_leads_with_time_to_ready_and_shows_what_differs():
    from coldscope.analysis.comparison import compare
    from coldscope.core.stages import BUCKETS
    from coldscope.render.tables import comparison_table
    def rec(i, compile_s, inspect_s, na=()):
        stages = dict.fromkeys(BUCKETS)
        stages.update({"bootstrap": 20.0 + i / 10, "torch_compile": compile_s,
                       "unattributed": 0.05, "cuda_graph_capture": None})
        subs = {"bootstrap/imports": 9.0 + i / 10, "bootstrap/model_inspect": inspect_s}
        return _run(f"r{i}-{compile_s}", cache="warm", stages=stages, substeps=subs,
                    not_applicable=["cuda_graph_capture", *na],
                    time_to_ready_s=20.05 + i / 10 + (compile_s or 0))

    a = [rec(i, 13.0 + i / 5, 9.0 + i / 7) for i in range(3)]
    b = [rec(i, None, 9.0 + i / 6, na=["torch_compile"]) for i in range(3)]
    b.append(_run("failed-1", status="failed", reason="engine exited with code 1"))
    text = _print(comparison_table(compare(a, b, cache="warm")), width=120)
    first = text.splitlines()[0]
    assert first.startswith("b vs a: time to ready 33.35 s -> 20.15 s, -13.20 s (95 % interval")
    assert first.endswith("b is faster")
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "faster" in rows["torch_compile"] and "13.20" in rows["torch_compile"]
    assert "unresolved" in rows["bootstrap"]  # identical on both sides
    assert "cuda_graph_capture" not in rows  # 0 s on both sides: left out, and said so
    assert "Not shown (0 s or unknown on both sides): tokenizer" in " ".join(text.split())
    assert "2 unresolved sub-step(s) not shown" in text
    assert "left out of b: failed-1 (failed: engine exited with code 1)" in text
