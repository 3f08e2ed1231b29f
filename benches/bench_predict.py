"""How fast ``predict`` answers: the library call and the CLI, on the paper-fitted model.

Run: ``.venv/bin/python benches/bench_predict.py``. Prints median and p95 wall times (ms) of
1. ``StartupModel.predict`` on a loaded model (what an autoscaler keeps in memory),
2. ``estimate_startup(model file, model directory)`` (load + read features + predict),
3. ``coldscope predict DIR --startup-model FILE --json`` as a new process (interpreter start,
   imports, everything).
Target: well under 100 ms for the library calls.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PAPER = SHARED / "data" / "paper"
MODEL_DIR = SHARED / "fixtures" / "model-configs" / "llama-2-7b-hf"


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def report(name: str, ms: list[float]) -> None:
    ms = sorted(ms)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    print(f"{name:<58} median {statistics.median(ms):8.3f} ms   p95 {p95:8.3f} ms   n={len(ms)}")


def main() -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from coldscope.features import model_features
    from coldscope.predict.paper import (
        PAPER_CAPTURE_SIZES,
        observations_from_paper,
        paper_environment,
    )
    from coldscope.predictor import StartupModel, estimate_startup

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h100.json"
        t0 = time.perf_counter()
        model = StartupModel().fit(observations_from_paper(PAPER), paper_environment(PAPER),
                                   {"capture_sizes": PAPER_CAPTURE_SIZES}, source=str(PAPER))
        print(f"fit on the paper data (12 models, nested LOMO): "
              f"{(time.perf_counter() - t0) * 1000:.0f} ms")
        model.save(path)
        features = model_features(MODEL_DIR)
        loaded = StartupModel.load(path)
        report("StartupModel.predict (model in memory)",
               timed(lambda: loaded.predict(features), 2000))
        report("StartupModel.load + predict", timed(lambda: StartupModel.load(path).predict(
            features), 300))
        report("estimate_startup(file, model dir)  [load+features+predict]",
               timed(lambda: estimate_startup(path, MODEL_DIR), 300))
        cli = [sys.executable, "-m", "coldscope.cli.main", "predict", str(MODEL_DIR),
               "--startup-model", str(path), "--json"]
        report("CLI: coldscope predict DIR --json (new process)",
               timed(lambda: subprocess.run(cli, check=True, capture_output=True), 10))
        report("CLI baseline: python -c pass (interpreter start only)",
               timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 10))


if __name__ == "__main__":
    main()
