"""The one console every rich text output goes through, safe for text from logs and stores.

A log line, a model name, a finding's evidence or a run's note can hold terminal control
sequences (an OSC window title, a hidden OSC 8 hyperlink, CSI cursor moves) or rich markup
(``[link=...]``, ``[bold]``). ``SafeConsole`` makes both inert, whatever the renderer did:

- **no markup** by default: a string is printed as it is, never parsed as ``[style]`` tags
  (renderers style with ``Text``/``style=``; a caller that means markup passes
  ``markup=True`` and escapes its data);
- every string and every rendered segment passes through ``safeio.clean_text``, so no control
  sequence from data reaches the terminal or a pipe (rich's own styling is produced from
  styles afterwards and is untouched);
- **no hyperlinks**: coldscope prints none, so a link in a segment can only have come from
  data, and is dropped.

Plain-text output (``click.echo``) goes through ``coldscope.cli.common.echo``, which cleans the
same way; JSON escapes control characters by itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from coldscope.util.safeio import clean_text


class SafeConsole(Console):
    """A rich ``Console`` that never passes control sequences, markup or links from data."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(*args, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # before measuring: a table sizes its columns on the cleaned text
        return super().render_str(clean_text(text), **kwargs)

    def render(self, renderable: RenderableType,
               options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            text, style, control = segment
            if control:  # rich's own cursor and screen controls (progress bars)
                yield segment
                continue
            if style is not None and style.link:
                style = style.update_link(None)
            yield Segment(clean_text(text), style)


def plain(text: object, style: str = "") -> Text:
    """``text`` (from a log or a store) as a rich ``Text``: never read as markup, cleaned of
    control sequences, on any console."""
    return Text(clean_text(str(text)), style=style)
