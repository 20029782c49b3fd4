"""Finish the project: drop files of choices not taken, fill in the image's CUDA base, write
LICENSE and the answers record; then say what to type next."""

import json
import os
import sys
from pathlib import Path

# Cookiecutter and cruft render this hook while their working folder is the template's, then run
# it from a temporary file in the new project: the template folder is known only now.
TEMPLATE_DIR = r"{{ lipsum.__globals__['os'].getcwd() }}"
ANSWERS = json.loads(r"""{{ cookiecutter | jsonify }}""")

sys.dont_write_bytecode = True  # leave no __pycache__ in the user's template checkout
sys.path.insert(0, TEMPLATE_DIR)
from template_tools import (  # noqa: E402
    QUIET_ENV,
    next_steps,
    prune,
    remove_at_exit,
    write_answers_record,
    write_image_defaults,
    write_license,
    write_package_pin,
)

remove_at_exit(__file__)
PROJECT_DIR = Path.cwd()
prune(PROJECT_DIR, ANSWERS)
write_image_defaults(PROJECT_DIR, ANSWERS)
write_package_pin(PROJECT_DIR, ANSWERS, Path(TEMPLATE_DIR))
write_license(PROJECT_DIR, ANSWERS)
write_answers_record(PROJECT_DIR, ANSWERS, Path(TEMPLATE_DIR))
if not os.environ.get(QUIET_ENV):
    print(next_steps(PROJECT_DIR))
