"""Reading the user's YAML/JSON files (campaign matrices, profiles, sweeps, traffic, tiers).

One reader, so every command reports a missing or malformed file the same way: one line naming
the file (and the line, for YAML), never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coldscope.errors import ColdscopeError


def read_mapping(path: str | Path, what: str = "file") -> dict[str, Any]:
    """The mapping in a YAML (or ``.json``) file; an empty file is ``{}``."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ColdscopeError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ColdscopeError(f"{path}: not a text file ({exc.reason} at byte {exc.start})") \
            from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ColdscopeError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ColdscopeError(f"{path}:{where} not valid YAML ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ColdscopeError(f"{path}: a {what} must be a mapping (key: value), "
                             f"not a {type(data).__name__}")
    return data
