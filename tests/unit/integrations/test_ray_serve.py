"""``ColdscopePolicy`` called as Ray Serve 2.60 calls it, with real ``AutoscalingContext``s.

Expected values come from the advisor's closed form (the p90 of the observed runs by linear
interpolation, numpy's quantile; ``ceil(total / target)``; Little's law on the requests in
service), from Ray's own wrapper and policy-loading functions, and from ``coldscope.predict``
for the predicted start-up; never from the adapter itself. Without ``ray[serve]`` these tests
are skipped, and fail under ``CI=true`` (``tests.conftest.needs``).
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coldscope.integrations.ray_serve import LOG_MARK, STATE_KEY, ColdscopePolicy
from coldscope.util.errors import ColdscopeError
from tests.conftest import SHARED, needs


def _serve_available() -> bool:
    try:
        import ray.serve.config  # noqa: F401
    except Exception:
        return False
    return True


pytestmark = needs(_serve_available(), "ray[serve] is not installed (run `make test`)")

OBSERVED = [3.0, 3.5, 4.0, 4.5, 5.0]
BASE = {"observed_s": OBSERVED, "target_ongoing_requests": 2, "service_time_s": 1.0}
PATH = "coldscope.integrations.ray_serve:ColdscopePolicy"
CONFIGS = SHARED / "fixtures" / "model-configs"
PAPER = SHARED / "data" / "paper"


def config(**fields: Any) -> Any:
    from ray.serve.config import AutoscalingConfig
    values = {"min_replicas": 1, "max_replicas": 10, "upscale_delay_s": 0,
              "downscale_delay_s": 0, "look_back_period_s": 2}
    values.update(fields)
    return AutoscalingConfig(**values)


def context(*, t: float, running: int, target: int, total: float, queued: float | None = 0.0,
            low: int = 1, high: int = 10, cfg: Any = None, state: dict | None = None) -> Any:
    """A real ``AutoscalingContext``, with the fields Ray's controller fills in."""
    from ray.serve._private.common import DeploymentID
    from ray.serve.config import AutoscalingContext
    return AutoscalingContext(
        deployment_id=DeploymentID(name="dep", app_name="app"), deployment_name="dep",
        app_name="app", current_num_replicas=running, target_num_replicas=target,
        running_replicas=[], total_num_requests=lambda: total,  # Ray passes callables
        total_queued_requests=lambda: queued, aggregated_metrics={}, raw_metrics={},
        capacity_adjusted_min_replicas=low, capacity_adjusted_max_replicas=high,
        policy_state=state or {}, last_scale_up_time=None, last_scale_down_time=None,
        current_time=t, config=cfg if cfg is not None else config())


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9) if x > 1e-9 else 0


def test_fields_map_onto_a_tick() -> None:
    policy = ColdscopePolicy(**BASE)
    n, state = policy(context(t=1000.0, running=1, target=3, total=7.0, queued=3.0))
    s = state[STATE_KEY]
    p50, p90, p99 = np.quantile(OBSERVED, [0.5, 0.9, 0.99])
    assert s["time_s"] == 1000.0
    assert (s["running"], s["starting"]) == (1, 2)  # target - current: still cold-starting
    assert s["rate_rps"] == pytest.approx((7.0 - 3.0) / 1.0)  # Little's law, in service only
    assert s["now_replicas"] == _ceil(7.0 / 2)  # in service + queued over the target
    assert s["scale_ahead_s"] == pytest.approx(p90)
    assert s["startup_s"] == pytest.approx({"p50": p50, "p90": p90, "p99": p99})
    assert s["source"] == "observed" and s["warnings"] == [] and s["error"] is None
    assert (s["total_num_requests"], s["total_queued_requests"]) == (7.0, 3.0)
    assert n == s["returned_replicas"] == s["desired_replicas"] == 4
    # replicas stopping (target below running) are not starting ones
    _, state = policy(context(t=1001.0, running=4, target=2, total=0.0))
    assert state[STATE_KEY]["starting"] == 0 and state[STATE_KEY]["running"] == 4


def test_queued_none_and_queued_above_total() -> None:
    policy = ColdscopePolicy(**BASE)
    _, s = policy(context(t=1.0, running=1, target=1, total=5.0, queued=None))
    assert s[STATE_KEY]["rate_rps"] == pytest.approx(5.0)
    # two windows aggregated apart: queued may read above total; in service is then 0
    _, s = policy(context(t=2.0, running=1, target=1, total=2.0, queued=3.0))
    assert s[STATE_KEY]["total_queued_requests"] == 2.0
    assert s[STATE_KEY]["rate_rps"] == 0.0 and s[STATE_KEY]["now_replicas"] == 1


def test_bounded_by_rays_capacity_adjusted_bounds() -> None:
    policy = ColdscopePolicy(**BASE, scale_down_delay_s=0, keep_alive_s=0)
    n, s = policy(context(t=1.0, running=1, target=1, total=40.0, high=3))
    assert (n, s[STATE_KEY]["bounded_by"], s[STATE_KEY]["desired_replicas"]) == \
        (3, "max_replicas", 20)
    policy = ColdscopePolicy(**BASE)
    n, s = policy(context(t=2.0, running=3, target=3, total=0.0, low=2))
    assert (n, s[STATE_KEY]["bounded_by"], s[STATE_KEY]["desired_replicas"]) == \
        (2, "min_replicas", 0)


def test_replica_rps_sets_the_time_in_service() -> None:
    # a replica holding 4 requests serves 2 requests/s: T = 4 / 2 = 2 s (Little's law)
    policy = ColdscopePolicy(observed_s=OBSERVED, target_ongoing_requests=4, replica_rps=2.0)
    _, s = policy(context(t=1.0, running=1, target=1, total=6.0, queued=0.0))
    assert s[STATE_KEY]["service_time_s"] == 2.0
    assert s[STATE_KEY]["rate_rps"] == pytest.approx(3.0)
    # Ray's default target_ongoing_requests (2) when none is given
    policy = ColdscopePolicy(observed_s=OBSERVED, replica_rps=4.0)
    _, s = policy(context(t=1.0, running=1, target=1, total=6.0))
    assert s[STATE_KEY]["service_time_s"] == 0.5 and s[STATE_KEY]["now_replicas"] == 3


def test_state_is_json_and_rays_wrapper_keeps_it() -> None:
    from ray.serve.autoscaling_policy import _apply_autoscaling_config
    policy = _apply_autoscaling_config(ColdscopePolicy(**BASE))
    n, state = policy(context(t=1.0, running=1, target=1, total=9.0))
    assert n == 5
    text = json.dumps(state[STATE_KEY], allow_nan=False)
    assert json.loads(text) == state[STATE_KEY]
    # Ray merges its delay bookkeeping into the dict the policy returned
    assert "__decision_counters" in state and STATE_KEY in state


def test_rays_default_delays_are_named_in_the_warnings() -> None:
    from ray.serve.autoscaling_policy import _apply_autoscaling_config
    from ray.serve.config import AutoscalingConfig
    policy = _apply_autoscaling_config(ColdscopePolicy(**BASE))
    cfg = AutoscalingConfig(min_replicas=1, max_replicas=10)  # Ray's defaults: 30 s / 600 s
    n, state = policy(context(t=1.0, running=1, target=1, total=9.0, cfg=cfg))
    assert n == 1  # Ray holds the scale-up for upscale_delay_s
    warnings = state[STATE_KEY]["warnings"]
    assert any("upscale_delay_s (30 s)" in w for w in warnings)
    assert any("downscale_delay_s (600 s)" in w for w in warnings)
    assert any("look_back_period_s (30 s)" in w for w in warnings)


def test_a_failing_tick_holds_the_target_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    policy = ColdscopePolicy(**BASE)
    with caplog.at_level(logging.WARNING, logger="ray.serve"):
        n, s = policy(context(t=1.0, running=2, target=3, total=float("nan")))
        policy(context(t=1.1, running=2, target=3, total=float("nan")))
    assert n == 3 and "in_flight" in s[STATE_KEY]["error"]
    assert len([r for r in caplog.records if "tick failed" in r.getMessage()]) == 1
    # a wall clock that steps back is held, not an error
    policy(context(t=10.0, running=1, target=1, total=1.0))
    n, s = policy(context(t=9.0, running=1, target=1, total=1.0))
    assert s[STATE_KEY]["error"] is None and s[STATE_KEY]["time_s"] == 10.0


def test_a_line_in_rays_log_per_change(caplog: pytest.LogCaptureFixture) -> None:
    policy = ColdscopePolicy(**BASE)
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        for k in range(5):
            policy(context(t=1.0 + 0.1 * k, running=1, target=1, total=0.0))
        _, state = policy(context(t=2.0, running=1, target=1, total=6.0))
    lines = [r.getMessage() for r in caplog.records if LOG_MARK in r.getMessage()]
    assert len(lines) == 2
    assert json.loads(lines[-1].split(LOG_MARK, 1)[1]) == state
    quiet = ColdscopePolicy(**BASE, log_decisions=False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        quiet(context(t=1.0, running=1, target=1, total=6.0))
    assert not caplog.records


def test_loaded_as_ray_loads_it_by_value() -> None:
    from ray.serve._private.autoscaling_state import _resolve_policy_callable
    from ray.serve.config import AutoscalingPolicy
    policy = AutoscalingPolicy(policy_function=PATH, policy_kwargs=BASE)
    built = _resolve_policy_callable(policy)
    assert type(built).__name__ == "ColdscopePolicy"  # built once, with the kwargs
    n, state = built(context(t=1.0, running=1, target=1, total=9.0))
    assert n == 5 and state[STATE_KEY]["scale_ahead_s"] == pytest.approx(np.quantile(OBSERVED,
                                                                                     0.9))


def test_unpickled_where_the_module_cannot_be_imported(tmp_path: Path) -> None:
    """The controller needs coldscope.scaling, not this module: Ray pickles it by value."""
    from ray.serve.config import AutoscalingPolicy
    blob = tmp_path / "policy.pkl"
    blob.write_bytes(AutoscalingPolicy(policy_function=PATH).get_serialized_policy_def())
    code = f"""
import importlib.abc, json, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("coldscope.integrations"):
            raise ImportError("blocked: " + name)
        return None
sys.meta_path.insert(0, Refuse())
from ray import cloudpickle
cls = cloudpickle.loads(open({str(blob)!r}, "rb").read())
policy = cls(**{BASE!r})
assert not any(m.startswith("coldscope.integrations") for m in sys.modules)

class Ctx:
    deployment_name, app_name, current_num_replicas, target_num_replicas = "d", "a", 1, 1
    total_num_requests, total_queued_requests, current_time = 9.0, 0.0, 1.0
    capacity_adjusted_min_replicas, capacity_adjusted_max_replicas, config = 1, 10, None
n, state = policy(Ctx())
print(json.dumps([n, state]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    n, state = json.loads(done.stdout.strip().splitlines()[-1])
    assert n == 5 and state[STATE_KEY]["error"] is None


@pytest.mark.parametrize(("kwargs", "named"), [
    ({**BASE, "replicas_rps": 2}, "replicas_rps"),  # a typo, with the near name
    ({"observed_s": OBSERVED}, "replica_rps"),
    ({**BASE, "replica_rps": 2.0}, "replica_rps"),
    ({**BASE, "service_time_s": 0}, "service_time_s"),
    ({**BASE, "service_time_s": "1s"}, "service_time_s"),
    ({"observed_s": OBSERVED, "replica_rps": -1}, "replica_rps"),
    ({**BASE, "target_ongoing_requests": 0}, "target_ongoing_requests"),
    ({**BASE, "observed_s": "3,4,5"}, "observed_s"),
    ({**BASE, "observed_s": [3.0, "x"]}, "observed_s"),
    ({**BASE, "observed_s": []}, "observed_s"),
    ({**BASE, "observed_s": [-3.0]}, "observed_s"),
    ({"service_time_s": 1.0}, "observed_s"),
    ({**BASE, "sla_p99_ttft": "fast"}, "sla_p99_ttft"),
    ({**BASE, "sla_p99_ttft": True}, "sla_p99_ttft"),
    ({**BASE, "source": "guess"}, "source"),
    ({**BASE, "source": "predicted"}, "startup_model"),
    ({**BASE, "keep_alive_s": -1}, "keep_alive_s"),
    ({**BASE, "min_replicas": 3, "max_replicas": 2}, "max_replicas"),
    ({**BASE, "scale_ahead_quantile": 1.5}, "scale_ahead_quantile"),
    ({**BASE, "log_decisions": "yes"}, "log_decisions"),
    ({**BASE, "store": "/nonexistent/s.db"}, "store"),
    ({"store": "/nonexistent/s.db", "model": "m", "service_time_s": 1.0}, "store"),
    ({**BASE, "startup_model": "m.json"}, "model"),
    ({"model": "x", "model_root": "/nonexistent", "startup_model": "m.json",
      "service_time_s": 1.0}, "model_root"),
    ({**BASE, "cache": "hot"}, "cache"),
])
def test_bad_kwargs_are_one_line_naming_the_kwarg(kwargs: dict, named: str) -> None:
    json.dumps(kwargs)  # what Ray accepts as policy_kwargs
    with pytest.raises(ColdscopeError) as err:
        ColdscopePolicy(**kwargs)
    message = str(err.value)
    assert "\n" not in message and named in message, message
    assert message.startswith("ColdscopePolicy")


def test_the_typo_gets_the_near_name() -> None:
    with pytest.raises(ColdscopeError, match="did you mean replica_rps"):
        ColdscopePolicy(**BASE, replicas_rps=2)


def test_runs_from_a_store(tmp_path: Path) -> None:
    from coldscope.core.records import ModelRef, Run
    from coldscope.store.db import Store
    times = [41.0, 44.0, 39.5, 52.0, 47.5, 45.0]
    with Store(tmp_path / "s.db") as store:
        for i, ttr in enumerate(times):
            store.add_run(Run(id=f"run{i}", status="ok", cache="cold", time_to_ready_s=ttr,
                              model=ModelRef(path="/models/qwen-7b", name="qwen-7b"),
                              started_at=f"2026-01-01T00:00:{i:02d}"))
        store.add_run(Run(id="other", status="ok", cache="cold", time_to_ready_s=500.0,
                          model=ModelRef(path="/models/big", name="big"),
                          started_at="2026-01-01T00:01:00"))
    policy = ColdscopePolicy(store=str(tmp_path / "s.db"), model="qwen-7b", replica_rps=1.0)
    _, s = policy(context(t=1.0, running=1, target=1, total=1.0))
    assert s[STATE_KEY]["source"] == "observed"
    assert s[STATE_KEY]["scale_ahead_s"] == pytest.approx(np.quantile(times, 0.9))
    with pytest.raises(ColdscopeError, match="no finished start-up of model 'gone'"):
        ColdscopePolicy(store=str(tmp_path / "s.db"), model="gone", replica_rps=1.0)


def test_predicted_from_a_startup_model_under_a_model_root(startup_model: Path) -> None:
    from statistics import NormalDist

    import coldscope
    prediction = coldscope.predict(startup_model, CONFIGS / "deepseek-v3")
    policy = ColdscopePolicy(model="deepseek-v3", model_root=str(CONFIGS),
                             startup_model=str(startup_model), replica_rps=0.5,
                             sla_p99_ttft="2s")
    _, state = policy(context(t=1.0, running=1, target=1, total=1.0))
    s = state[STATE_KEY]
    assert s["source"] == "predicted"
    # a log-normal through the total (median) and the interval's wider side, at its level
    total, lo, hi = prediction.total_s, prediction.interval.low, prediction.interval.high
    sigma = max(math.log(total / lo), math.log(hi / total)) / NormalDist().inv_cdf(
        0.5 + prediction.level / 2)
    assert s["startup_s"]["p50"] == pytest.approx(total)
    assert s["scale_ahead_s"] == pytest.approx(total * math.exp(sigma * NormalDist().inv_cdf(0.9)))
    assert len(prediction.warnings) > 0
    assert all(w in s["warnings"] for w in prediction.warnings)  # carried, not dropped
    assert "the 2 s SLA" in s["floor_reason"]  # the SLA reached the warm-floor rule
    with pytest.raises(ColdscopeError, match="outside model_root"):
        ColdscopePolicy(model="../model-configs/../../README.md", model_root=str(CONFIGS),
                        startup_model=str(startup_model), replica_rps=0.5)


def test_importing_the_adapter_loads_no_ray_and_nothing_heavy() -> None:
    """Ray's controller imports what the pickled class refers to: coldscope.scaling only."""
    code = ("import sys, coldscope.integrations.ray_serve; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('ray', 'numpy', 'numba', 'pydantic', 'fastapi', 'torch', "
            "'yaml') or m.startswith(('coldscope.planning', 'coldscope.prediction', "
            "'coldscope.api'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_the_docs_example_is_the_config_the_integration_test_deploys() -> None:
    import ast

    from tests.conftest import REPO
    from tests.integration.integrations.test_ray_serve import AUTOSCALING_CONFIG, TARGET
    text = (REPO / "docs" / "autoscale.md").read_text()
    start = text.index("## Ray Serve: `ColdscopePolicy`")
    opening = text.index("```python\n", start) + len("```python\n")
    code = text[opening:text.index("\n```\n", opening)]
    (cls,) = [n for n in ast.parse(code).body if isinstance(n, ast.ClassDef)]
    (call,) = cls.decorator_list
    assert isinstance(call, ast.Call)
    given = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert given["autoscaling_config"] == AUTOSCALING_CONFIG
    assert given["max_ongoing_requests"] == TARGET
