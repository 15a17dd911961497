"""What the watch screen and plot draw, read from the store and analysis in one go; analysis never imports it."""
