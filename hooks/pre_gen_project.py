"""Reject answers that would make a broken project, before any file is written."""

import json
import sys

# Cookiecutter and cruft render this hook while their working folder is the template's, then run
# it from a temporary file: the template folder (and template_tools in it) is known only now.
TEMPLATE_DIR = r"{{ lipsum.__globals__['os'].getcwd() }}"
ANSWERS = json.loads(r"""{{ cookiecutter | jsonify }}""")

sys.dont_write_bytecode = True  # leave no __pycache__ in the user's template checkout
sys.path.insert(0, TEMPLATE_DIR)
from template_tools import remove_at_exit, validate  # noqa: E402

remove_at_exit(__file__)
try:
    validate(ANSWERS)
except ValueError as error:
    sys.exit(f"error: {error}")
