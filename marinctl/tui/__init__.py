"""The `watch` TUI: the only package that imports textual / textual_plotext.

Everything it shows is read by views/ (watch_view.py and the chart and header modules it calls)
in thread workers; this package lays it out in widgets that own their keys, paints it (through
render/chart.py on each chart's own plotext figure) and keeps it current.
"""
