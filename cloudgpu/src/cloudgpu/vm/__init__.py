"""What a run's VM runs: startup.sh, with the run's values written in by startup.py; the exporters
that --monitor starts beside the trainer (exporters.py, exporters.json), and the tunnels that
`invoke monitor --run` opens to them (tunnels.py)."""
