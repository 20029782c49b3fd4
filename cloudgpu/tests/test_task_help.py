"""Every task a project lists, as a user reads it: `invoke --list` in the baked project, and each
task's own `-h` (the tasks are this package's; the project's tasks.py declares them)."""

from __future__ import annotations

import re

from baked_project import invoke_cli


def test_every_listed_task_has_a_whole_sentence_and_its_own_help() -> None:
    listed = invoke_cli("--list")
    assert listed.returncode == 0, listed.stderr
    names = re.findall(r"^  (\S+)", listed.stdout, re.MULTILINE)  # continuations go deeper
    # Each task's help line (its docstring's first line) is a whole sentence, never cut off.
    helps = re.findall(r"^  (\S+) +(.*(?:\n {4,}.*)*)", listed.stdout, re.MULTILINE)
    cut = [name for name, text in helps if not " ".join(text.split()).endswith(".")]
    assert len(helps) == len(names) and cut == []
    assert len(names) > 15
    for name in names:  # a task's own short flags never take -h (--shard-size once did)
        helped = invoke_cli(name, "-h")
        assert helped.returncode == 0 and f"] {name} [" in helped.stdout, helped.stderr
    assert len(names) == len(set(names))  # each task once: no image.build beside build
    assert not any(name.startswith(("image.", "cloud.")) for name in names)


def test_an_old_task_name_says_the_new_one() -> None:
    renamed = invoke_cli("image.build")
    assert renamed.returncode == 2
    assert renamed.stderr.strip() == "error: invoke image.build is now invoke build"


def test_positional_arguments_leave_help_as_help() -> None:
    helped = invoke_cli("data.prepare", "--help")  # SRC DEST are positional: --help is still help
    assert helped.returncode == 0 and "--shard-size" in helped.stdout, helped.stderr
