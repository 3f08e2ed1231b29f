"""Evidence capture: log adapters, the engine's spans, the in-process probe, the runner."""
