"""Training data and fitting for the startup model (``coldscope.prediction.startup_model``)."""
