"""What tune's cold start-ups pay to be cold as a new node is (README "5-11 s per cold
start-up here"; docs/tune.md): the eviction of the model's files and of every directory the
engine's interpreter imports from (``launch.runner.drop_page_cache`` on the model,
``tuning.session.evict_python`` on this interpreter, as tune does), and what it does to a
fresh ``import torch``, timed before and after each eviction, ``--repeat`` times interleaved.

No engine starts; the page cache of this machine is evicted for the engine's files
(other work on the machine then reads them from disk again).

    .venv/bin/python benches/bench_cold_evict.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchlib import figure

REPO = Path(__file__).resolve().parents[1]


def import_torch_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default=str(REPO / "models" / "tiny"))
    args = ap.parse_args()
    from coldscope.launch.runner import drop_page_cache
    from coldscope.tuning.session import evict_python
    hot, after, took = [], [], []
    import_torch_s()  # load it once, so that the first "hot" import is hot
    for i in range(args.repeat):
        hot.append(import_torch_s())
        t0 = time.perf_counter()
        model = drop_page_cache(args.model)
        python = evict_python(sys.executable)
        took.append(time.perf_counter() - t0)
        if not (model.startswith("done") and python.startswith("done")):
            figure("eviction of the model and the engine's Python", f"{model}; {python}",
                   target="done", met=False)
            return 0
        after.append(import_torch_s())
        print(f"{i + 1}: import torch {hot[-1]:.2f} s hot, evicted in {took[-1]:.1f} s, "
              f"then import torch {after[-1]:.2f} s", flush=True)
    n = args.repeat
    figure("what one eviction covered (the model; the engine's Python trees)",
           f"{model}; {python}")
    figure(f"eviction of the model and the engine's Python, {n} times",
           f"{min(took):.1f}-{max(took):.1f} s")
    figure(f"fresh `import torch`, page cache hot vs just evicted, {n} interleaved pairs",
           f"{min(hot):.2f}-{max(hot):.2f} s vs {min(after):.2f}-{max(after):.2f} s",
           target="slower after", met=min(after) > max(hot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
