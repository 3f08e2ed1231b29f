"""Stand-ins for an engine whose start-up depends on vLLM-like knobs, for testing ``tune`` —
never evidence of real engine behaviour.

``FakeTunable`` answers the search's requests directly (per-knob stage costs, multiplicative
noise from a seeded generator, caches that only help when an earlier start-up of the same
configuration left them, a throughput cost for eager mode and multiprocessing off, and a
standby launcher that has done each process's imports ahead, except for a prime, which the
session starts without it).

Run as a script, it is a process the runner can start: it sleeps a start-up whose length
depends on the same knobs (scaled to tenths of a second), keeps a "compiled graph" marker in
``VLLM_CACHE_ROOT``, and serves /health and /v1/completions (streaming or not; the token ids
when asked as vLLM is, ``return_token_ids``) with a per-token delay that depends on eager mode.
"""

from __future__ import annotations

import random
import statistics

from coldscope.tuning.search import Measurement, TrialRequest

BASE = {"bootstrap": 50.0, "model_loading": 2.0, "torch_compile": 45.0,
        "kv_cache_profiling": 1.0, "server_ready": 1.0, "unattributed": 10.0}
#: The fake's answer to the greedy prompt: three words, one token id each.
GREEDY_TEXT = "the same words"
GREEDY_IDS = (5, 17, 42)
#: Seconds each engine process spends importing, and starting from a standby launcher's fork.
IMPORTS_PER_PROCESS_S = 10.0
LAUNCHED_PROCESS_S = 0.5


class FakeTunable:
    """Per-knob stage costs on the tiny-model scale of the real machine (seconds)."""

    def __init__(self, noise: float = 0.0, seed: int = 0, placebo: bool = False,
                 fail: set[str] | None = None, round_noise: float = 0.03) -> None:
        self.rng = random.Random(seed)
        self.noise = noise
        self.round_noise = round_noise
        self.primed: set[str] = set()
        self.calls: list[TrialRequest] = []
        self.fail = fail or set()

    def __call__(self, req: TrialRequest) -> Measurement:
        self.calls.append(req)
        knobs = set(req.knobs)
        if knobs & self.fail:
            return Measurement(ok=False, run_id=f"r{req.index}", reason="engine exited")
        warm = req.seeded and req.cache_key in self.primed
        self.primed.add(req.cache_key)
        s = dict(BASE)
        findings = []
        inspect = 0.0 if warm else 17.0
        extra_procs = 1 if "multiprocessing_off" in knobs else 2
        launched = "standby_launcher" in knobs and req.role != "prime"
        per_process = LAUNCHED_PROCESS_S if launched else IMPORTS_PER_PROCESS_S
        s["bootstrap"] = 16.0 + inspect + per_process * (1 + extra_procs)
        if "enforce_eager" in knobs:
            s["torch_compile"] = 0.0
        elif warm and "aot_compile_off" in knobs:
            s["torch_compile"] = 5.0
        elif warm:
            s["torch_compile"] = 18.0
            findings.append({"id": "compile_cache_load_failed", "seconds_at_stake": 18.0})
        else:
            s["torch_compile"] = 45.0
            findings.append({"id": "compile_cache_cold", "seconds_at_stake": 45.0})
        if inspect:
            findings.append({"id": "model_inspect_uncached", "seconds_at_stake": inspect})
        if extra_procs > 1 and not launched:
            findings.append({"id": "repeated_imports", "seconds_at_stake": 20.0})
        factor = 1.0 + (self.rng.gauss(0.0, self.noise) if self.noise else 0.0)
        s = {k: v * factor for k, v in s.items()}
        throughput = 100.0
        if "enforce_eager" in knobs:
            throughput *= 0.85
        if "multiprocessing_off" in knobs:
            throughput *= 0.93
        # six serving rounds scattered around the configuration's throughput
        rounds = [throughput * (1.0 + self.rng.gauss(0.0, self.round_noise)) for _ in range(6)]
        return Measurement(ok=True, run_id=f"r{req.index}", time_to_ready_s=sum(s.values()),
                           stages=s, findings=findings, throughput=statistics.median(rounds),
                           rounds=rounds, greedy=GREEDY_TEXT, greedy_token_ids=list(GREEDY_IDS))


def _serve() -> None:  # pragma: no cover - runs as the engine process
    import argparse
    import json
    import os
    import sys
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="fake")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--compilation-config", default=None)
    p.add_argument("--otlp-traces-endpoint", default=None)
    p.add_argument("--scale", type=float, default=0.01)
    args, _ = p.parse_known_args()
    # vLLM's own default: VLLM_CACHE_ROOT, else ~/.cache/vllm (HOME is per run under coldscope)
    root = Path(os.environ.get("VLLM_CACHE_ROOT") or Path.home() / ".cache" / "vllm")
    marker = root / "torch_compile_cache" / "graph"
    mp = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
    aot = os.environ.get("VLLM_USE_AOT_COMPILE", "1") != "0"
    print("vllm-fake INFO starting", flush=True)
    startup = 30.0 + (20.0 if mp else 0.0)
    if not (root / "modelinfos").exists():
        startup += 17.0
        (root / "modelinfos").mkdir(parents=True, exist_ok=True)
    if not args.enforce_eager:
        if marker.exists() and not aot:
            startup += 5.0
        elif marker.exists():
            print("WARNING Compiling model again due to a load failure (fake)", flush=True)
            startup += 18.0
        else:
            startup += 45.0
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("compiled")
    print("vllm-fake INFO Starting to load model (fake)", flush=True)  # a live stage line
    time.sleep(startup * args.scale)
    per_token = 0.002 * (1.3 if args.enforce_eager else 1.0) * (1.0 if mp else 1.1)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            n = int(body.get("max_tokens") or 8)
            time.sleep(per_token * n)
            text = " ".join(["word"] * n)
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunk = {"choices": [{"text": text, "index": 0}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
                return
            choice: dict[str, object] = {"text": text, "index": 0}
            if body.get("return_token_ids"):  # vLLM's field: one id per generated "word"
                choice["token_ids"] = [7] * n
            data = json.dumps({"choices": [choice], "usage": {"completion_tokens": n}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("INFO:     Application startup complete.", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    _serve()
