"""What the SVG pictures (`view.egraph_view`, `view.plot`) share: the text conventions, the
document frame and the picture object. Standard library only, so that a plot does not import
egglog.

Text is monospace at FONT_SIZE, its width estimated from the number of characters; coordinates
are written in whole pixels (`px`); every text is escaped.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable
from dataclasses import dataclass

FONT_SIZE = 11
CHAR_WIDTH = 6.7  # of a monospace font at FONT_SIZE


@dataclass(frozen=True)
class SvgPicture:
    """A self-contained SVG document; Jupyter renders it (`_repr_svg_`)."""

    svg: str

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the picture as an .svg file (UTF-8)."""
        with open(path, "w", encoding="utf-8") as file:
            file.write(self.svg)


def svg_document(width: float, height: float, title: str, body: Iterable[str]) -> str:
    """A whole SVG document, one element per line: the <svg> root of `width` x `height`
    pixels, its <title>, a white background, then `body`."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{px(width)}" height="{px(height)}" '
        f'viewBox="0 0 {px(width)} {px(height)}" font-family="monospace" '
        f'font-size="{FONT_SIZE}">',
        f"<title>{escape(title)}</title>",
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        *body,
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def svg_text(text: str, x: float, y: float, colour: str = "#111111", anchor: str = "middle") -> str:
    """A <text> element at (x, y), escaped."""
    return (
        f'<text x="{px(x)}" y="{px(y)}" text-anchor="{anchor}" fill="{colour}">'
        f"{escape(text)}</text>"
    )


def text_width(text: str) -> float:
    """Pixels `text` takes at FONT_SIZE."""
    return len(text) * CHAR_WIDTH


def escape(text: str) -> str:
    return html.escape(text, quote=True)


def px(value: float) -> str:
    return str(round(value))  # whole pixels: smaller files, and fast
