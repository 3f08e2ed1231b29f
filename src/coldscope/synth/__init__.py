"""Synthetic inputs made locally: small models with random weights and a tokenizer trained on
local text (``tiny_model``), for the demo, the tests and campaigns' model-size sweeps, since no
model hub is reachable."""
