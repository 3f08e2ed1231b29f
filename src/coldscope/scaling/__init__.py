"""Start-up-aware scaling: how many replicas to have now, asked for one cold path ahead.

``ScaleAdvisor`` (``coldscope.ScaleAdvisor``) is one scaling policy per model: fed the rate
or the requests in flight once a tick, it answers a ``ScaleDecision`` (desired replicas and
the start-up, forecast and warm floor behind them). The simulator's ``--policy predictive`` is
this advisor; ``serve``'s scale hint and the autoscaler adapters build on it. The package uses
the standard library only (the planner's warm-floor rule is imported when an SLA is given), so
importing it loads no engine, web server, numba, pyarrow or Ray. docs/autoscale.md has the
method and its measured forecast error.

Modules: ``advisor`` (the policy and its decision), ``forecast`` (the rate one cold path
ahead), ``startup`` (the start-up distribution it plans with: measured runs, a prediction, or
given).
"""

from coldscope.scaling.advisor import ScaleAdvisor, ScaleDecision
from coldscope.scaling.forecast import RateForecaster
from coldscope.scaling.startup import (
    MIN_OBSERVED_RUNS,
    Percentiles,
    StartupDistribution,
    choose,
    times_to_ready,
)

__all__ = ["MIN_OBSERVED_RUNS", "Percentiles", "RateForecaster", "ScaleAdvisor",
           "ScaleDecision", "StartupDistribution", "choose", "times_to_ready"]
