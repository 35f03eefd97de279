"""A scatter plot as self-contained SVG (standard library only), for notebooks and reports.

    plot = scatter([Point(1.2e-3, 1.5e-3, "matmul"), Point(4e-3, 3.1e-3, "matmul", "chosen")],
                   x_label="predicted ms", y_label="measured ms", diagonal=True)
    plot                 # Jupyter renders it (`_repr_svg_`); plot.save("calibration.svg")

Points are coloured by series (one legend entry each, in order of first appearance); a point's
label, if any, is written beside it, and every point has a tooltip with its coordinates. Axes
are logarithmic by default, with ticks at powers of ten (and at 2 and 5 times them when the data
spans less than two decades). The text conventions are those of `eqsat.view.svg`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from eqsat.view.svg import FONT_SIZE, SvgPicture, escape, px, svg_document, svg_text, text_width

WIDTH, HEIGHT = 560, 380  # of the plotting area and its axes, legend excluded
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 40, 44  # margins around the plotting area
LEGEND_GAP, SWATCH = 20, 10
RADIUS = 4
TICK = 4
PADDING = 0.05  # of the data range, on each side
COLOURS = ("#2b6cb0", "#dd6b20", "#2f855a", "#c53030", "#6b46c1", "#975a16", "#d53f8c", "#4a5568")
AXIS_COLOUR, GRID_COLOUR, DIAGONAL_COLOUR = "#333333", "#e2e2e2", "#999999"


@dataclass(frozen=True)
class Point:
    """One point: its coordinates, its series (a colour and a legend entry) and an optional
    label written beside it."""

    x: float
    y: float
    series: str = ""
    label: str = ""


@dataclass(frozen=True)
class ScatterPlot(SvgPicture):
    """An SVG scatter plot (`svg`, `_repr_svg_`, `save`) and how many points it shows."""

    points: int


def scatter(
    points: Sequence[Point],
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    log_x: bool = True,
    log_y: bool = True,
    diagonal: bool = False,
) -> ScatterPlot:
    """Plot `points` on linear or logarithmic axes; with `diagonal`, draw the line y = x.

    It requires:
    1. at least one point; every coordinate finite, and positive on a logarithmic axis.
    2. `diagonal` only with both axes logarithmic or both linear (the line is straight then).
    Raises ValueError otherwise.
    """
    if not points:
        raise ValueError("scatter needs at least one point")
    if diagonal and log_x != log_y:
        raise ValueError("diagonal=True needs both axes logarithmic or both linear")
    x_axis = _Axis([p.x for p in points], log_x, 0.0, WIDTH, "x")
    y_axis = _Axis([p.y for p in points], log_y, HEIGHT, 0.0, "y")  # pixels grow downwards
    series = list(dict.fromkeys(p.series for p in points))
    colours = {name: COLOURS[k % len(COLOURS)] for k, name in enumerate(series)}
    legend = [name for name in series if name]
    legend_width = max((text_width(name) for name in legend), default=0.0)
    width = LEFT + WIDTH + RIGHT + (LEGEND_GAP + SWATCH + 6 + legend_width if legend else 0)
    height = TOP + HEIGHT + BOTTOM
    parts = [
        f'<g transform="translate({LEFT},{TOP})">',
        *x_axis.grid_and_ticks(),
        *y_axis.grid_and_ticks(),
        f'<rect class="frame" width="{WIDTH}" height="{HEIGHT}" fill="none" '
        f'stroke="{AXIS_COLOUR}"/>',
        *([_diagonal(x_axis, y_axis)] if diagonal else []),
        *(_point_svg(p, x_axis, y_axis, colours[p.series]) for p in points),
        svg_text(x_label, WIDTH / 2, HEIGHT + BOTTOM - 8),
        svg_text(y_label, -LEFT + 4, -10, anchor="start"),
        *(_legend(legend, colours) if legend else []),
        "</g>",
    ]
    if title:
        parts.append(svg_text(title, LEFT + WIDTH / 2, 14))
    return ScatterPlot(svg_document(width, height, title or "scatter plot", parts), len(points))


class _Axis:
    """The mapping of one coordinate from data to pixels, and its ticks."""

    def __init__(self, values: list[float], log: bool, start: float, end: float, name: str) -> None:
        """It requires: `values` finite and, on a logarithmic axis, positive (else ValueError).
        `start` and `end` are the pixels of the low and the high end of the range."""
        if not all(math.isfinite(v) and (v > 0 or not log) for v in values):
            kind = "positive and finite (logarithmic axis)" if log else "finite"
            raise ValueError(f"every {name} coordinate must be {kind}, got {values}")
        self.log, self.start, self.end, self.name = log, start, end, name
        low, high = min(map(self._scale, values)), max(map(self._scale, values))
        spread = high - low or (1.0 if log or low == 0 else abs(low))
        self.low, self.high = low - PADDING * spread, high + PADDING * spread

    def _scale(self, value: float) -> float:
        return math.log10(value) if self.log else value

    def pixel(self, value: float) -> float:
        """Where `value` lands (it requires: positive on a logarithmic axis)."""
        return self.scaled_pixel(self._scale(value))

    def scaled_pixel(self, scaled: float) -> float:
        """Where the scaled coordinate `scaled` (a log10 on a logarithmic axis) lands."""
        fraction = (scaled - self.low) / (self.high - self.low)
        return self.start + fraction * (self.end - self.start)

    def ticks(self) -> list[float]:
        """Tick values inside the axis range: powers of ten (times 2 and 5 when the range spans
        less than two decades) on a log axis, multiples of 1, 2 or 5 times a power of ten on a
        linear one (about six of them)."""
        if self.log:
            steps = (1.0,) if self.high - self.low >= 2 else (1.0, 2.0, 5.0)
            decades = range(math.floor(self.low), math.ceil(self.high) + 1)
            values = [step * 10.0**decade for decade in decades for step in steps]
        else:
            rough = (self.high - self.low) / 6
            power = 10.0 ** math.floor(math.log10(rough))
            step = min(m * power for m in (1, 2, 5, 10) if m * power >= rough)
            first, last = math.ceil(self.low / step), math.floor(self.high / step)
            values = [k * step for k in range(first, last + 1)]
        return [v for v in values if self.low <= self._scale(v) <= self.high]

    def grid_and_ticks(self) -> list[str]:
        """A grid line, a tick mark and a label per tick."""
        parts = []
        for value in self.ticks():
            where = self.pixel(value)
            at = px(where)
            if self.name == "x":
                parts.append(
                    f'<line class="grid" x1="{at}" y1="0" x2="{at}" y2="{HEIGHT}" '
                    f'stroke="{GRID_COLOUR}"/><line x1="{at}" y1="{HEIGHT}" x2="{at}" '
                    f'y2="{HEIGHT + TICK}" stroke="{AXIS_COLOUR}"/>'
                )
                parts.append(svg_text(_tick_text(value), where, HEIGHT + 16))
            else:
                parts.append(
                    f'<line class="grid" x1="0" y1="{at}" x2="{WIDTH}" y2="{at}" '
                    f'stroke="{GRID_COLOUR}"/><line x1="{-TICK}" y1="{at}" x2="0" y2="{at}" '
                    f'stroke="{AXIS_COLOUR}"/>'
                )
                parts.append(svg_text(_tick_text(value), -TICK - 3, where + 4, anchor="end"))
        return parts


def _tick_text(value: float) -> str:
    return f"{value:g}"


def _diagonal(x_axis: _Axis, y_axis: _Axis) -> str:
    """The line y = x where both axes' ranges overlap (nothing when they do not)."""
    low, high = max(x_axis.low, y_axis.low), min(x_axis.high, y_axis.high)
    if low >= high:
        return ""
    ends = [(x_axis.scaled_pixel(v), y_axis.scaled_pixel(v)) for v in (low, high)]
    (x1, y1), (x2, y2) = ends
    return (
        f'<line class="diagonal" x1="{px(x1)}" y1="{px(y1)}" x2="{px(x2)}" y2="{px(y2)}" '
        f'stroke="{DIAGONAL_COLOUR}" stroke-dasharray="6 4"/>'
    )


def _point_svg(point: Point, x_axis: _Axis, y_axis: _Axis, colour: str) -> str:
    x, y = x_axis.pixel(point.x), y_axis.pixel(point.y)
    name = f"{point.series}: " if point.series else ""
    tip = f"{name}{point.label + ' ' if point.label else ''}({point.x:.4g}, {point.y:.4g})"
    circle = (
        f'<circle class="point" cx="{px(x)}" cy="{px(y)}" r="{RADIUS}" fill="{colour}" '
        f'fill-opacity="0.75" stroke="{colour}"><title>{escape(tip)}</title></circle>'
    )
    if not point.label:
        return circle
    return circle + svg_text(point.label, x + RADIUS + 3, y - RADIUS, colour, anchor="start")


def _legend(names: list[str], colours: dict[str, str]) -> list[str]:
    """One swatch and name per series, to the right of the plotting area."""
    parts = []
    for row, name in enumerate(names):
        x, y = WIDTH + LEGEND_GAP, 8 + row * (FONT_SIZE + 8)
        parts.append(
            f'<rect class="swatch" x="{x}" y="{y}" width="{SWATCH}" height="{SWATCH}" '
            f'fill="{colours[name]}"/>'
            + svg_text(name, x + SWATCH + 6, y + SWATCH - 1, anchor="start")
        )
    return parts
