"""The start-up an advisor for one model plans with, fetched from where it is known.

Every place that builds a :class:`~coldscope.scaling.ScaleAdvisor` for a named model (Ray
Serve's ``ColdscopePolicy``, ``serve``'s ``/v1/scale-hint`` and its ``--advise`` gauges) has
the same two sources: measured start-ups (a store's runs of the model) and a prediction (a
startup model applied to the model's directory). Reading runs is a query; predicting reads the
model's files and may run in a process of its own. :func:`startup_inputs` applies the source
rule of :func:`~coldscope.scaling.startup.choose` *before* fetching, so each caller fetches
only what the chosen distribution uses: the runs first, then the prediction only for
``predicted``, or for ``auto`` with fewer than ``min_runs`` runs. How each source is read
(paths, confinement, isolation) stays the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coldscope.scaling.startup import MIN_OBSERVED_RUNS, PredictionLike, SourceChoice
from coldscope.util.errors import ColdscopeError

#: Reads the measured start-ups (seconds); ``None``: no runs can be known.
ObservedReader = Callable[[], Sequence[float]]
#: Computes the prediction; ``None``: no prediction can be made.
Predictor = Callable[[], PredictionLike]


def startup_inputs(source: SourceChoice, *, observed: ObservedReader | None = None,
                   predict: Predictor | None = None, min_runs: int = MIN_OBSERVED_RUNS
                   ) -> tuple[list[float], PredictionLike | None]:
    """``(observed_s, prediction)`` for ``ScaleAdvisor(observed_s=..., prediction=...,
    source=source)``: what ``choose`` will use, and nothing it will not.

    ``observed`` is read unless ``source`` is ``predicted``; ``predict`` is called for
    ``predicted``, and for ``auto`` when fewer than ``min_runs`` runs were read. A source the
    choice needs and the caller cannot give is a one-line ``ColdscopeError``.
    """
    if source not in ("auto", "observed", "predicted"):
        raise ColdscopeError(f"source must be auto, observed or predicted, not {source!r}")
    runs: list[float] = []
    if source != "predicted" and observed is not None:
        runs = [float(t) for t in observed()]
    if source == "observed":
        if not runs:
            raise ColdscopeError("source 'observed' needs measured start-ups of the model, "
                                 "and none are known")
        return runs, None
    if source == "predicted" and predict is None:
        raise ColdscopeError("source 'predicted' needs a prediction of the model's start-up "
                             "(a startup model and the model's directory)")
    if predict is not None and (source == "predicted" or len(runs) < min_runs):
        return runs, predict()
    return runs, None
