"""The training machinery: one run (fit.py), the loop, checkpoints and resume, the device and
precision (runtime.py), schedules, stop signals, and what a run writes (outputs.py, storage.py)."""
