"""A tiny stand-in engine for testing the runner's process handling — never evidence of real
engine behaviour. Modes: ok (serves /health and a streaming /v1/completions after --delay),
exit (exits with code 3), hang (never ready), stubborn (ok, plus a child that ignores SIGTERM
and escapes the process group)."""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--mode", default="ok")
parser.add_argument("--port", type=int, default=8799)
parser.add_argument("--delay", type=float, default=0.5)
parser.add_argument("--model", default="fake")
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--compile-key", default=None,
                    help="say, in vLLM's words, which compile-cache directory (under "
                         "TORCHINDUCTOR_CACHE_DIR, named by this value) it used, and write a "
                         "factors file there as vLLM does")
parser.add_argument("--stage-lines", type=float, default=None, metavar="SECONDS",
                    help="print vLLM's stage lines, SECONDS apart, before the delay (live "
                         "progress tests)")
args, _unknown = parser.parse_known_args()  # other flags (--toy, ...) are the tests' markers

print("fake engine starting", flush=True)
if args.stage_lines is not None:
    for line in ("INFO Initializing a V1 LLM engine (v0.32.0) with config: model='fake'",
                 "INFO Starting to load model fake...",
                 "INFO Warming up model for the compilation...",
                 "INFO init engine (profile, create kv cache, warmup model) took 0.10 s"):
        print(line, flush=True)
        time.sleep(args.stage_lines)
if args.compile_key is not None:
    key_dir = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "torch_compile_cache",
                           args.compile_key, "rank_0_0", "backbone")
    os.makedirs(key_dir, exist_ok=True)
    with open(os.path.join(key_dir, "cache_key_factors.json"), "w") as f:
        json.dump({"env": {"VLLM_FAKE": args.compile_key}, "config_hash": args.compile_key * 4},
                  f)
    print("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.32.0) with config: "
          "model='fake'", flush=True)
    print(f"INFO 01-01 00:00:00 [backends.py:1] Using cache directory: {key_dir} for vLLM's "
          "torch.compile", flush=True)
if args.mode == "exit":
    print("fatal: cannot load model", flush=True)
    sys.exit(3)
if args.mode == "stubborn":
    # A grandchild in a new session that ignores SIGTERM: only the run marker finds it.
    subprocess.Popen([sys.executable, "-c",
                      "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "time.sleep(600)"], start_new_session=True)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(args.delay)
if args.mode == "hang":
    time.sleep(600)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for word in ("hello", " world"):
            chunk = {"choices": [{"text": word, "index": 0}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *a):
        pass


server = HTTPServer(("127.0.0.1", args.port), Handler)
print(f"Application startup complete. pid={os.getpid()}", flush=True)
server.serve_forever()
