"""A job of several machines: which node this is on each service (nodes.py), and its secrets
from the cloud's store (run_secrets.py); launch.py starts it."""
