"""Training data and fitting for the startup model (``coldscope.predictor``)."""
