{{ cookiecutter.description | tojson }}

import os

# TensorFlow's C++ start-up lines (CPU instruction sets, absl) stay out of the run's output.
# Set before TensorFlow loads, here; TF_CPP_MIN_LOG_LEVEL=0 in your environment shows them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
