"""Where a run's data comes from, and how it is split and batched."""
