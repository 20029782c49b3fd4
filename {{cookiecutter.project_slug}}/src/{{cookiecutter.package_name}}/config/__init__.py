"""What a run may be told and how a command starts: every config key's type and range (schema.py,
rules.py, checks.py), the command line checked before Hydra (preflight.py), the entry points'
start (command.py), and the end of a sweep (sweeps.py)."""
