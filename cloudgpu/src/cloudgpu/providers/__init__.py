"""Each cloud through its own CLI: its registry, bucket and identity, and a run's VM (aws.py,
gcp.py, azure.py), or this machine's Docker engine standing in for one (local.py)."""
