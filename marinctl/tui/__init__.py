"""The `watch` TUI: the only package that imports textual / textual_plotext.

Everything it shows is computed by analysis (watch_view.py and the chart/header modules it
calls) in thread workers; this package only lays it out, paints it (through render/chart.py
on each chart's own plotext figure) and routes keys.
"""
