"""The one exception type the CLI turns into a one-line error and a non-zero exit, and the one
helper that turns a pydantic validation error into such a line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic is imported by the caller that has a ValidationError in hand
    from pydantic import ValidationError


class ColdscopeError(Exception):
    """A user-facing error: bad input, a missing file, an engine that cannot be run.

    The message must read as one complete line; the CLI prints ``error: <message>`` and exits 2.
    """


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def one_line(exc: ValidationError, source: str) -> str:
    """The first validation problem as one line, ``SOURCE: where: message``, plus how many
    more there are. ``source`` names the input (a file, "option", "run record")."""
    errors = exc.errors(include_url=False)
    if not errors:
        return f"{source}: invalid"
    first = errors[0]
    msg = str(first["msg"]).removeprefix("Value error, ")
    line = f"{source}: {_where(tuple(first['loc']))}: {msg}"
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return line


def validation_error(exc: ValidationError, source: str) -> ColdscopeError:
    """``raise validation_error(exc, "plan.yaml") from None``: the one-line user error."""
    return ColdscopeError(one_line(exc, source))
