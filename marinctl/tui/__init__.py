"""The `watch` TUI: the only package that imports textual / textual_plotext.

Everything it shows is computed by `marinctl.analysis.series_view` in thread workers;
this package only lays it out, paints it and routes keys.
"""
