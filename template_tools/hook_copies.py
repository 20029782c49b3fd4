"""The hooks' own copies: cookiecutter (2.7, `hooks.run_script_with_context`) renders each hook
into a file in the temporary folder, runs it and leaves it there, two files a project."""

import atexit
import contextlib
import os
import tempfile


def remove_at_exit(hook_file: str) -> None:
    """Take the running hook's rendered copy away when the hook ends, exit or error alike; a
    hook run from anywhere but the temporary folder is left as it is."""
    path = os.path.realpath(hook_file)
    if os.path.dirname(path) == os.path.realpath(tempfile.gettempdir()):
        atexit.register(_remove, path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
