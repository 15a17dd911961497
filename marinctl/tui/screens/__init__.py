"""Modal screens: help and the explain panel."""
