"""The SVG scatter plot: well-formed XML, one circle per point, escaped text, positions that
follow the axes' scales, ticks, legend and diagonal."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from eqsat.view.plot import Point, scatter

SVG = "{http://www.w3.org/2000/svg}"


def of_class(svg: str, kind: str) -> list[ET.Element]:
    return [e for e in ET.fromstring(svg).iter() if e.get("class") == kind]


def centres(svg: str) -> list[tuple[float, float]]:
    return [(float(c.get("cx", "")), float(c.get("cy", ""))) for c in of_class(svg, "point")]


def texts(svg: str) -> list[str]:
    return [e.text or "" for e in ET.fromstring(svg).iter(f"{SVG}text")]


def test_one_circle_per_point_and_the_svg_parses() -> None:
    points = [Point(k + 1.0, 2.0 * k + 1.0, series=f"s{k % 3}") for k in range(17)]
    plot = scatter(points, title="t", x_label="x", y_label="y")
    assert plot.points == 17 == len(of_class(plot.svg, "point"))
    assert plot._repr_svg_() == plot.svg
    assert len(of_class(plot.svg, "swatch")) == 3  # one legend entry per series


def test_hostile_text_is_escaped() -> None:
    hostile = '<script>alert("x")</script> & </svg>'
    plot = scatter(
        [Point(1.0, 2.0, series=hostile, label=hostile)],
        title=hostile,
        x_label=hostile,
        y_label=hostile,
    )
    root = ET.fromstring(plot.svg)  # raises if anything broke out of its element
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    assert texts(plot.svg).count(hostile) == 5  # title, axis labels, point label, legend
    assert root.find(f"{SVG}title").text == hostile  # type: ignore[union-attr]


def test_log_axes_space_decades_equally() -> None:
    plot = scatter([Point(1.0, 1.0), Point(10.0, 100.0), Point(100.0, 10_000.0)])
    (x1, y1), (x2, y2), (x3, y3) = centres(plot.svg)
    assert x1 < x2 < x3 and y1 > y2 > y3  # pixels grow downwards
    assert math.isclose(x2 - x1, x3 - x2, abs_tol=1) and math.isclose(y2 - y1, y3 - y2, abs_tol=1)
    assert {"1", "10", "100", "1000", "10000"} <= set(texts(plot.svg))


def test_linear_axes_keep_proportions() -> None:
    plot = scatter([Point(0.0, 0.0), Point(1.0, 1.0), Point(3.0, 3.0)], log_x=False, log_y=False)
    (x0, _), (x1, _), (x3, _) = centres(plot.svg)
    assert math.isclose(x3 - x0, 3 * (x1 - x0), abs_tol=1.5)
    assert {"0", "1", "2", "3"} <= set(texts(plot.svg))


def test_short_log_range_gets_ticks_at_2_and_5() -> None:
    plot = scatter([Point(1.0, 1.0), Point(9.0, 9.0)])
    assert {"1", "2", "5"} <= set(texts(plot.svg))


def test_diagonal_runs_through_equal_coordinates() -> None:
    plot = scatter([Point(1.0, 2.0), Point(3.0, 1.5), Point(2.0, 2.0)], diagonal=True)
    (line,) = of_class(plot.svg, "diagonal")
    (_, _), (_, _), (x, y) = centres(plot.svg)  # the point (2, 2) is on y = x
    x1, y1, x2, y2 = (float(line.get(name, "")) for name in ("x1", "y1", "x2", "y2"))
    on_line = y1 + (y2 - y1) * (x - x1) / (x2 - x1)
    assert abs(on_line - y) <= 2


def test_no_diagonal_unless_asked() -> None:
    assert of_class(scatter([Point(1.0, 2.0)]).svg, "diagonal") == []


def test_scatter_fail_non_positive_on_log_axis() -> None:
    with pytest.raises(ValueError, match="positive"):
        scatter([Point(1.0, 0.0)])


def test_scatter_fail_not_finite() -> None:
    with pytest.raises(ValueError, match="finite"):
        scatter([Point(math.nan, 1.0)], log_x=False)


def test_scatter_fail_diagonal_on_mixed_axes() -> None:
    with pytest.raises(ValueError, match="diagonal"):
        scatter([Point(1.0, 1.0)], log_y=False, diagonal=True)


def test_scatter_fail_no_points() -> None:
    with pytest.raises(ValueError, match="at least one"):
        scatter([])
