"""Widgets of the watch screen."""
