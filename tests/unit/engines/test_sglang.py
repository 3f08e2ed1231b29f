"""SGLang as a second engine, for logs: the two real 0.5.x logs and synthetic ones (a draft
model's second load, per-phase capture lines, tensor-parallel ranks, a crash, a cut-off log).
Expected values come from the log text (regexes over the file, or numbers read by eye), never
from coldscope's output."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from coldscope import engines
from coldscope.core.stages import BUCKETS
from coldscope.engines import READY, resolve
from coldscope.engines.sglang import SGLang
from coldscope.engines.vllm import VLLM
from coldscope.ingest.assemble import run_from_log

WILD = "fixtures/wild-logs"
V0511 = f"{WILD}/sglang-0.5.11nv-gb10-qwen2.5-1.5b.log"
V057 = f"{WILD}/sglang-0.5.7-unknown48g-llama3.2-3b.log"
STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\]")


def lines_of(shared, rel):
    return (shared / rel).read_bytes().decode("utf-8", "replace").splitlines()


def stamp(text: str) -> dt.datetime:
    return dt.datetime.strptime(STAMP.search(text).group(1), "%Y-%m-%d %H:%M:%S")


def line_with(lines, needle):
    return next(x for x in lines if needle in x)


def assert_sums(tl):
    total = sum(tl.stages[b] for b in BUCKETS if tl.stages[b] is not None)
    assert total == pytest.approx(tl.time_to_ready, abs=1e-9)
    assert all(v is None or 0 <= v <= tl.time_to_ready for v in tl.stages.values())


# -- the real logs ------------------------------------------------------------------------------


def test_sglang_0_5_11_log_states_its_own_values(shared):
    lines = lines_of(shared, V0511)
    text = "\n".join(lines)
    found = engines.read_log(lines)
    assert found is not None and found.engine.name == "sglang"
    reading = found
    tl = reading.timeline
    assert reading.failure is None
    assert_sums(tl)
    first = next(x for x in lines if STAMP.match(x))
    ready = line_with(lines, "The server is fired up and ready to roll!")
    assert tl.time_to_ready == (stamp(ready) - stamp(first)).total_seconds()
    loaded = float(re.search(r"Load weight end\. elapsed=([\d.]+) s", text).group(1))
    assert tl.stages["model_loading"] == pytest.approx(loaded)  # 18.22
    captures = [float(x) for x in re.findall(r"CUDA graph end\. Time elapsed: ([\d.]+) s", text,
                                             re.IGNORECASE)]
    assert captures == [12.64, 16.70]
    bar = re.findall(r"Compiling num tokens.*?58/58 \[00:(\d\d)<", text.replace("\r", "\n"))
    assert bar and float(bar[-1]) == 8
    # the piecewise pass compiles, then captures: its compile is carved out of the capture
    assert tl.stages["torch_compile"] == pytest.approx(float(bar[-1]))
    assert tl.stages["cuda_graph_capture"] + tl.stages["torch_compile"] == \
        pytest.approx(sum(captures))
    assert tl.substeps["cuda_graph_capture/decode"] == pytest.approx(captures[0])
    assert tl.stages["bootstrap"] == (stamp(line_with(lines, "Load weight begin"))
                                      - stamp(first)).total_seconds()
    assert tl.sources["bootstrap"] == "log-clock" and tl.stages["tokenizer"] is None
    app = line_with(lines, "Application startup complete.")
    assert tl.substeps["server_ready/warmup"] == (stamp(ready) - stamp(app)).total_seconds()
    run = run_from_log(lines, name="sglang.log")
    assert run.status == "ok" and run.engine.name == "sglang"
    assert run.engine.version == re.search(r"SGLang Version (\S+)", text).group(1)
    assert run.engine.device == "cuda"
    assert any("fired up" in n for n in run.notes)


def test_sglang_0_5_7_log_states_its_own_values(shared):
    lines = lines_of(shared, V057)
    text = "\n".join(lines)
    reading = engines.read_log(lines)
    engine = reading.engine
    assert engine.name == "sglang" and reading.failure is None
    tl = reading.timeline
    assert_sums(tl)
    # 0.5.7 states no load time: the begin and end stamps (14:38:20 -> 14:38:28)
    begin, end = line_with(lines, "Load weight begin"), line_with(lines, "Load weight end")
    assert tl.stages["model_loading"] == (stamp(end) - stamp(begin)).total_seconds() == 8
    capture = float(re.search(r"Capture cuda graph end\. Time elapsed: ([\d.]+) s", text)[1])
    assert tl.stages["cuda_graph_capture"] == pytest.approx(capture)  # 1.57
    first = next(x for x in lines if STAMP.match(x))
    ready = line_with(lines, "The server is fired up and ready to roll!")
    assert tl.time_to_ready == (stamp(ready) - stamp(first)).total_seconds() == 33
    # torch.compile off and no piecewise pass in this log
    assert "enable_torch_compile=False" in text and "torch_compile" in tl.not_applicable
    # the hierarchical cache's host memory (14:38:30) until the last engine line before the
    # HTTP server (Mooncake ready, 14:38:42) is KV-cache set-up
    assert tl.substeps["kv_cache_profiling/host_cache"] == 12
    run = run_from_log(lines, name="sglang-057.log")
    assert run.status == "ok" and run.engine.version is None  # the log states no version
    assert run.engine.name == "sglang"


def test_each_engines_reader_leaves_the_others_logs_alone(shared):
    sg = SGLang()
    for log in sorted((shared / "fixtures").glob("vllm-*/*.log")) + \
            sorted((shared / WILD).glob("vllm-*.log")):
        lines = log.read_bytes().decode("utf-8", "replace").splitlines()
        assert sg.read_log(lines) is None, log.name
        assert sg.log_facts(lines) is None, log.name
    for rel in (V0511, V057):
        assert engines.read_log(lines_of(shared, rel)).engine.name == "sglang"


def test_vllms_reader_leaves_sglang_logs_alone(shared):
    for rel in (V0511, V057):
        assert VLLM().read_log(lines_of(shared, rel)) is None


def test_followed_sglang_log_is_ready_at_its_fired_up_line(shared):
    lines = lines_of(shared, V0511)
    kinds = [(i, engines.startup_boundary(x)) for i, x in enumerate(lines)]
    marked = [(i, k) for i, k in kinds if k is not None]
    ready_at = next(i for i, x in enumerate(lines) if "ready to roll" in x)
    assert marked[0][1] == "start:server" and "server_args=" in lines[marked[0][0]]
    assert (ready_at, READY) in marked
    # SGLang's uvicorn line is not its ready line (vLLM's would be)
    app = next(i for i, x in enumerate(lines) if "Application startup complete" in x)
    assert engines.startup_boundary(lines[app]) is None
    assert engines.startup_boundary("(APIServer pid=1) INFO:     Application startup complete.") \
        == READY


def test_a_followed_stream_is_identified_once(shared, monkeypatch):
    """serve's watcher asks the adapters only until one claims a start line; from then on only
    that adapter reads the stream (the vLLM adapter is never asked again). Before it, vLLM's
    adapter is asked only about a line that holds one of the words its boundaries need (its
    declared ``boundary_marker``): a version, a start-up complete, a failure."""
    lines = lines_of(shared, V0511)
    vllm = engines.by_name("vllm")
    asked: list[str] = []
    original = type(vllm).startup_boundary
    monkeypatch.setattr(type(vllm), "startup_boundary",
                        lambda self, line: asked.append(line) or original(self, line))
    engine, identified_at = None, None
    for i, line in enumerate(lines):
        kind, engine = engines.follow_boundary(line, engine)
        if engine is not None and identified_at is None:
            identified_at = i
            assert kind == "start:server" and "server_args=" in line
    assert engine is not None and engine.name == "sglang"
    # lines before the start line (and the start line itself if asked before SGLang's
    # adapter), in order, none after it; only lines with vLLM's boundary words
    before = lines[:identified_at + 1]
    assert asked == [x for x in before if x in asked]
    assert all(re.search(r"version|startup complete|initialize_engine took|LLM engine \(v|fail", x)
               for x in asked)
    assert len(asked) < len([x for x in before if x.strip()])
    ready_at = next(i for i, x in enumerate(lines) if "ready to roll" in x)
    assert engines.follow_boundary(lines[ready_at], engine) == (READY, engine)


# -- synthetic logs -----------------------------------------------------------------------------

T0 = dt.datetime(2026, 1, 2, 3, 4, 0)


def sg(at: float, msg: str, tag: str = "") -> str:
    return f"[{(T0 + dt.timedelta(seconds=at)).strftime('%Y-%m-%d %H:%M:%S')}{tag}] {msg}"


ARGS = ("server_args=ServerArgs(model_path='org/m-7b', device='cuda', tp_size=1, "
        "skip_server_warmup=False, enable_torch_compile=False, disable_cuda_graph=False, "
        "cuda_graph_bs=[1, 2, 4, 8])")


def startup(*middle: str, end: float = 100.0) -> list[str]:
    return [sg(0, ARGS), *middle, sg(end - 3, "INFO:     Application startup complete."),
            sg(end, "The server is fired up and ready to roll!")]


def read(lines):
    found = engines.read_log(lines)
    assert found is not None and found.engine.name == "sglang"
    return found


def test_draft_model_loads_twice_and_loading_is_the_sum_of_both():
    lines = startup(
        sg(5, "Load weight begin. avail mem=70.00 GB"),
        sg(25, "Load weight end. elapsed=19.50 s, type=LlamaForCausalLM, mem usage=14 GB."),
        sg(27, "KV Cache is allocated. #tokens: 1000, K size: 1 GB, V size: 1 GB"),
        sg(28, "Memory pool end. avail mem=40.00 GB"),
        sg(28, "Capture cuda graph begin. This can take up to several minutes."),
        sg(40, "Capture cuda graph end. Time elapsed: 11.70 s. mem usage=1 GB."),
        sg(41, "Load weight begin. avail mem=39.00 GB"),
        sg(45, "Load weight end. elapsed=3.25 s, type=LlamaForCausalLMEagle3, mem usage=1 GB."),
        sg(46, "Memory pool end. avail mem=38.00 GB"),
        sg(46, "Capture draft decode CUDA graph begin. backend=full"),
        sg(52, "Capture draft decode CUDA graph end. elapsed=5.50 s, mem usage=0.2 GB."),
    )
    r = read(lines)
    tl = r.timeline
    assert r.failure is None and tl.time_to_ready == 100
    assert_sums(tl)
    assert tl.stages["model_loading"] == pytest.approx(19.50 + 3.25)  # not 45 - 5 = 40
    assert tl.substeps["model_loading/draft_weights"] == pytest.approx(3.25)
    assert tl.stages["cuda_graph_capture"] == pytest.approx(11.70 + 5.50)
    assert any("sum of their own durations" in n for n in r.notes)
    # without elapsed= (0.5.7 and older): each pair's own stamps, still summed
    plain = [re.sub(r" elapsed=[\d.]+ s,", "", x) for x in lines]
    tl = read(plain).timeline
    assert tl.stages["model_loading"] == pytest.approx((25 - 5) + (45 - 41))


def test_per_phase_capture_lines_of_later_releases():
    lines = startup(
        sg(5, "Load weight begin. avail mem=70.00 GB"),
        sg(20, "Load weight end. elapsed=15.00 s, type=Qwen3ForCausalLM"),
        sg(22, "Memory pool end. avail mem=40.00 GB"),
        sg(22, "Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4]"),
        sg(32, "Capture target decode CUDA graph end. elapsed=10.10 s, mem usage=0.79 GB."),
        sg(32, "Capture target verify CUDA graph begin. backend=full"),
        sg(34, "Capture target verify CUDA graph end. elapsed=1.61 s, mem usage=0.11 GB."),
        sg(34, "Capture target prefill CUDA graph begin."),
        sg(60, "Capture target prefill CUDA graph end. elapsed=25.40 s, mem usage=1.2 GB."),
        sg(61, "max_total_num_tokens=1226984, chunked_prefill_size=8192"),
        end=70,
    )
    tl = read(lines).timeline
    assert_sums(tl)
    assert tl.stages["cuda_graph_capture"] == pytest.approx(10.10 + 1.61 + 25.40)
    assert tl.substeps["cuda_graph_capture/target_decode"] == pytest.approx(10.10)
    assert tl.substeps["cuda_graph_capture/target_verify"] == pytest.approx(1.61)
    assert tl.substeps["cuda_graph_capture/target_prefill"] == pytest.approx(25.40)
    assert tl.stages["model_loading"] == pytest.approx(15.0)
    assert tl.stages["kv_cache_profiling"] == pytest.approx(22 - 20)


def test_tensor_parallel_ranks_report_the_slowest():
    lines = startup(
        sg(5, "Load weight begin. avail mem=70.00 GB", " TP0"),
        sg(5, "Load weight begin. avail mem=70.00 GB", " TP1"),
        sg(20, "Load weight end. elapsed=14.80 s, type=X", " TP0"),
        sg(23, "Load weight end. elapsed=17.60 s, type=X", " TP1"),
        sg(24, "Memory pool end. avail mem=40.00 GB", " TP0"),
        sg(25, "Memory pool end. avail mem=40.00 GB", " TP1"),
        end=40,
    )
    r = read(lines)
    assert r.timeline.stages["model_loading"] == pytest.approx(17.60)
    assert any("slowest, TP1" in n for n in r.notes)


def test_a_crash_after_the_weights_loaded_is_failed_with_the_logs_reason():
    lines = [
        sg(0, ARGS),
        sg(5, "Load weight begin. avail mem=70.00 GB"),
        sg(20, "Load weight end. elapsed=15.00 s, type=LlamaForCausalLM"),
        sg(21, "Scheduler hit an exception: Traceback (most recent call last):"),
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2700, in run_scheduler',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.",
        "",
        sg(21, "Received sigquit from a child process. It usually means the child failed."),
    ]
    r = read(lines)
    assert r.failure is not None and "CUDA out of memory. Tried to allocate 20.00 GiB" in r.failure
    # how far it got: the weights were loaded; no time to ready
    assert r.timeline.time_to_ready is None and r.timeline.stages["model_loading"] == 15
    assert r.timeline.stages["cuda_graph_capture"] is None
    run = run_from_log(lines, name="crash.log")
    assert run.status == "failed" and run.reason == r.failure
    assert run.engine.name == "sglang"
    # the same start-up without its ready line, cut off: failed, saying where it stopped
    cut = startup(sg(5, "Load weight begin. avail mem=70.00 GB"))[:-2]
    r = read(cut)
    assert r.failure.startswith('cut off after "Load weight begin') and \
        "ready to roll" in r.failure
    # stopping after 'Application startup complete.' is not ready: the warm-up never ended
    r = read(startup(sg(5, "Load weight begin."), sg(9, "Load weight end."))[:-1])
    assert r.failure is not None and "Application startup complete" in r.failure


def test_skip_server_warmup_is_ready_at_application_startup_complete():
    lines = [x.replace("skip_server_warmup=False", "skip_server_warmup=True") for x in
             startup(sg(5, "Load weight begin."), sg(9, "Load weight end."), end=20)[:-1]]
    r = read(lines)
    assert r.failure is None and r.timeline.time_to_ready == 17
    assert any("skip_server_warmup=True" in n for n in r.notes)


def test_ansi_colours_and_carriage_returns_give_the_same_timeline(shared):
    lines = lines_of(shared, V057)
    coloured = [f"\x1b[32m{x}\x1b[0m" if i % 2 else x for i, x in enumerate(lines)]
    assert read(coloured).timeline.stages == read(lines).timeline.stages


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "name"), [
    (["python", "-m", "sglang.launch_server", "--model-path", "/data/vllm-models/llama"],
     "sglang"),
    (["/opt/vllm/bin/python", "-m", "sglang.launch_server", "--model-path", "m"], "sglang"),
    (["sglang", "serve", "--model-path", "/srv/vllm/m"], "sglang"),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/data/sglang/m"],
     "vllm"),
    (["vllm", "serve", "/models/sglang-tuned"], "vllm"),
])
def test_the_command_line_chooses_the_engine_by_its_entry_point(argv, name):
    assert resolve(argv).name == name


def test_sglang_command_line():
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "org/m", "--port", "30001",
            "--cuda-graph-bs", "1", "2", "4", "--enable-torch-compile"]
    sg_ = resolve(argv)
    assert sg_.model(argv) == "org/m"
    assert sg_.health_url(argv) == "http://127.0.0.1:30001/health"
    assert sg_.capture_sizes(argv) == 3 and sg_.compile_enabled(argv)


def test_serve_watch_cuts_and_stores_sglang_startups(tmp_path):
    """``serve --watch`` needs nothing but the registered adapter: a restart before
    readiness, a start-up ready at its fired-up line (not at its uvicorn line), a crash."""
    from coldscope.serve.service import ServeConfig, Service
    from coldscope.store.db import Store
    load = [sg(5, "Load weight begin. avail mem=70.00 GB"),
            sg(20, "Load weight end. elapsed=15.00 s, type=LlamaForCausalLM")]
    lines = [sg(0, ARGS), *load,  # restarted before ready
             *startup(*load, end=40),
             sg(50, ARGS), sg(55, "Load weight begin. avail mem=70.00 GB"),
             sg(71, "Scheduler hit an exception: Traceback (most recent call last):"),
             "torch.OutOfMemoryError: CUDA out of memory."]
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "replica-a.log").write_text("\n".join(lines) + "\n")
    service = Service(ServeConfig(store=str(tmp_path / "s.db"), watch=[str(logs)]))
    assert service.watcher is not None
    service.watcher.poll_once()
    from coldscope.serve.watcher import SETTLE_S
    clock = service.watcher.clock  # the crash is stored once its log has been quiet
    service.watcher.clock = lambda: clock() + SETTLE_S
    service.watcher.poll_once()
    # cut as ``coldscope parse`` cuts the file: a start line before ready does not cut
    runs = Store(tmp_path / "s.db").runs(status=None)
    assert len(runs) == 2 and {r.engine.name for r in runs} == {"sglang"}
    [ok] = [r for r in runs if r.status == "ok"]
    assert ok.time_to_ready_s == 40 and ok.stages["model_loading"] == 15
    assert ok.model.path == "org/m-7b"
    [failed] = [r for r in runs if r.status == "failed"]
    assert failed.reason is not None and "torch.OutOfMemoryError" in failed.reason


def test_wrapped_and_repeated_lines_give_the_same_timeline(shared):
    """Docker/k8s timestamp prefixes and lines a harness repeated (same stamp and text) do not
    change what the log says; a package list naming sglang in another log claims nothing."""
    lines = lines_of(shared, V0511)
    clean = read(lines).timeline
    prefixed = [f"2026-06-08T01:57:00.000000000Z stdout F {x}" for x in lines]
    assert read(prefixed).timeline.stages == clean.stages
    twice = [y for x in lines for y in ((x, x) if STAMP.match(x) else (x,))]
    assert read(twice).timeline.stages == clean.stages
    assert SGLang().read_log(["pip freeze:", "sglang==0.5.7", "vllm==0.13.0"]) is None


@pytest.mark.parametrize("readme", ["fixtures/wild-logs/README.md", "fixtures/vllm-logs/README.md"])
def test_prose_that_quotes_engine_lines_is_no_log(shared, readme):
    """The fixtures' READMEs quote both engines' version lines and banners ("SGLang Version
    0.5.11+05fb6a52", "vLLM API server version 0.13.0") inside tables and backticks: no engine
    may claim them, so `parse DIR` refuses them instead of reporting a failed start-up."""
    lines = lines_of(shared, readme)
    if "wild" in readme:  # it quotes both engines' version lines
        assert any("SGLang Version 0.5.11" in line for line in lines)
        assert any("vLLM API server version 0.13.0" in line for line in lines)
    assert engines.read_log(lines) is None
