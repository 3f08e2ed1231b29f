"""Import costs the docs quote, each measured in fresh interpreters (no engine):

- the probe's load per Python process: ``python -X importtime -c pass`` with the probe armed
  as the runner arms it (``PYTHONPATH`` = the probe's directory, byte-compiled first, and
  ``COLDSCOPE_PROBE_DIR``); the cumulative import time of its ``sitecustomize``, median over
  ``--repeat`` interpreters (README: "0.6 ms per process"; docs/profile.md);
- ``import coldscope``: which heavy packages it loads (none, README "loads nothing heavy") and
  its cumulative import time, median over ``--repeat`` interpreters.

    .venv/bin/python benches/bench_import_time.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from benchlib import figure

HEAVY = ("torch", "vllm", "transformers", "fastapi", "pyarrow", "ray", "numpy", "scipy")


def cumulative_us(stderr: str, module: str) -> int | None:
    """The cumulative microseconds ``-X importtime`` gives ``module`` (a top-level import)."""
    for line in stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module and parts[1].isdigit():
            return int(parts[1])
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    from coldscope.launch.runner import _compiled_probe_dir
    probe_dir = _compiled_probe_dir()
    with tempfile.TemporaryDirectory(prefix="coldscope-bench-probe-") as out:
        env = dict(os.environ, PYTHONPATH=probe_dir, COLDSCOPE_PROBE_DIR=out)
        probe = []
        for _ in range(args.repeat):
            proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], env=env,
                                  capture_output=True, text=True, check=True)
            us = cumulative_us(proc.stderr, "sitecustomize")
            if us is None:
                raise SystemExit("the armed interpreter did not import the probe's sitecustomize")
            probe.append(us / 1000)
    figure(f"probe load per Python process (sitecustomize, -X importtime), median of "
           f"{args.repeat}", f"{statistics.median(probe):.2f} ms "
           f"(range {min(probe):.2f}-{max(probe):.2f})")

    check = ("import sys, coldscope; print(','.join(sorted(m for m in " + repr(HEAVY) +
             " if m in sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                            check=True).stdout.strip()
    figure("heavy packages loaded by `import coldscope` (" + ", ".join(HEAVY) + ")",
           loaded or "none", target="none", met=not loaded)
    took = []
    for _ in range(args.repeat):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import coldscope"],
                              capture_output=True, text=True, check=True)
        us = cumulative_us(proc.stderr, "coldscope")
        if us is not None:
            took.append(us / 1000)
    figure(f"`import coldscope` (cumulative, -X importtime), median of {len(took)}",
           f"{statistics.median(took):.1f} ms" if took else "not seen")
    return 0


if __name__ == "__main__":
    sys.exit(main())
