"""Modal screens: help, the explain panel and the diff panel."""
