"""The knob record lives with the engines (``coldscope.engines.knob``), which own their
catalogues; re-exported here for the tuner."""

from coldscope.engines.knob import ALL_CACHES, Knob, apply_all

__all__ = ["ALL_CACHES", "Knob", "apply_all"]
