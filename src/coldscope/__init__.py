"""coldscope: measure, explain, predict and plan the cold start of LLM inference servers."""

__version__ = "0.1.0"
