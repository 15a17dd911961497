"""Package marker: `marinctl serve`, the watch app in a browser (textual-serve, the `[web]` extra)."""
