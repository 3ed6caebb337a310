"""A chart's legend in its title row, where it hides no data.

pyqtgraph anchors a legend inside the plot's view box, over the curves (issue 30: the tokens/s, acceptance
and time-per-cycle legends covered their lines). Here the legend hangs from the plot item's top right
corner, beside a left-aligned title (or, for a narrow chart, below it), and the title row grows to hold
both, so the view box starts below them.
"""

from __future__ import annotations

import pyqtgraph as pg

TITLE_HEIGHT = 30.0  # a title row's own height, in pixels (its text and padding), above a legend placed below it


def title_row_legend(plot: pg.PlotItem, title: str, columns: int, below_title: bool = False) -> pg.LegendItem:
    """Give ``plot`` its title on the left and a legend of ``columns`` entries a row on the right (below the
    title with ``below_title``, for charts too narrow for both side by side); curves added to the plot with a
    name join it (PlotItem.addItem looks for ``plot.legend``)."""
    plot.setTitle(title, justify="left")
    legend = pg.LegendItem(colCount=columns)
    legend.setParentItem(plot)
    legend.anchor(itemPos=(1, 0), parentPos=(1, 0), offset=(-8, TITLE_HEIGHT if below_title else 2))
    plot.legend = legend
    above = TITLE_HEIGHT if below_title else 0.0
    _fit_title_row(plot, legend, above)
    # entries come and go (the ceiling's appears once known): the row follows the legend's height
    legend.geometryChanged.connect(lambda: _fit_title_row(plot, legend, above))
    return legend


def _fit_title_row(plot: pg.PlotItem, legend: pg.LegendItem, above: float) -> None:
    plot.layout.setRowFixedHeight(0, above + max(legend.boundingRect().height(), 18.0) + 4.0)
