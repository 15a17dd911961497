"""Detection: the anomaly detectors, their episodes and trends, one pass over new steps."""
