"""Watching a run: metrics.jsonl and the trackers of configs/logger/ (trackers.py), live metrics for
Prometheus (live.py, exporter.py) and the GPUs' own numbers (gpu_metrics.py)."""
