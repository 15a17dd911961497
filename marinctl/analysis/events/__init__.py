"""GitHub events placed on a run's step axis and read back as a timeline."""
