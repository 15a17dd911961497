"""Scaling: power laws over a ladder's rungs or an isoFLOP sweep's optima, and what they predict."""
