"""Reading the user's YAML/JSON files (campaign matrices, profiles, sweeps, traffic, tiers,
startup models, model configs, the paper's timings).

One reader, so every command reports a missing or malformed file the same way: one line naming
the file (and the line, for YAML), never a traceback. It reads through ``coldscope.util.safeio``:
a regular file only, at most ``COLDSCOPE_MAX_INPUT_BYTES`` (64 MiB by default), parsed without
YAML aliases or unbounded nesting, with every number finite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import load_structured


def read_mapping(path: str | Path, what: str = "file") -> dict[str, Any]:
    """The mapping in a YAML (or ``.json``) file; an empty file is ``{}``."""
    path = Path(path)
    data = load_structured(path, what=what)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ColdscopeError(f"{path}: a {what} must be a mapping (key: value), "
                             f"not a {type(data).__name__}")
    return data
