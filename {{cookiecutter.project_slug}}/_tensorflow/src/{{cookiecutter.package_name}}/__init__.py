{{ cookiecutter.description | tojson }}

import os

from .training import quiet_start

# TensorFlow's C++ start-up lines (CPU instruction sets, absl) and warnings stay out of the
# run's output: a data error, say, is one line of ours, not its kernel's copy of our traceback.
# Set before TensorFlow loads, here; TF_CPP_MIN_LOG_LEVEL=0 in your environment shows them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
quiet_start.install()  # the few that TF_CPP_MIN_LOG_LEVEL does not reach
