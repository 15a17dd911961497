"""Views for the terminal without textual: plotext figures and plain text the CLI prints.

Everything here draws what analysis computed; numbers go through `marinctl.numbers`.
The watch TUI paints its charts through `render.chart.paint` too, on its own figure.
"""
