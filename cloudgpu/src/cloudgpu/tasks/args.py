"""The command line of the tasks: whole-number flags, and Hydra overrides after `--`.

invoke turns an `int` flag's bad value into a traceback and an override typed before `--` into
"No idea what 'model=cnn' is!". These helpers answer both with one line naming the flag and the
fix, and exit status 2.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
import sys
from pathlib import Path

from invoke import Collection, Context, Exit

# What a Hydra override looks like: key=value, +key=value, ~key, group/option=...
OVERRIDE = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][\w.@/-]*=")


def override_args(c: Context) -> list[str]:
    """The arguments given after `--`, each one as the shell handed it over. invoke joins them
    with spaces (c.remainder), which loses the bounds of a quoted one, so they are read from
    sys.argv, where they are still whole (c.remainder split again is the fallback)."""
    if "--" in sys.argv:
        given = sys.argv[sys.argv.index("--") + 1 :]
        if " ".join(given) == c.remainder:
            return given
    return shlex.split(c.remainder)


def overrides(c: Context) -> str:
    """The arguments after `--`, quoted for the shell that c.run starts: each reaches the
    command as one argument, and nothing in one ($(...), ${...}, quotes) is the shell's."""
    return shlex.join(override_args(c))


def whole_number(flag: str, value: str | int, minimum: int) -> int:
    """`value` of `--flag` as an int of at least `minimum`; exit 2 naming the flag otherwise."""
    try:
        number = int(value)
    except ValueError:
        raise Exit(
            f"error: {flag} {value!r} is not a whole number; for example {flag} {minimum}", 2
        ) from None
    if number < minimum:
        raise Exit(f"error: {flag} must be at least {minimum}, got {number}", code=2)
    return number


def refuse_overrides_before_dashes(namespace: Collection, argv: list[str]) -> None:
    """Exit 2 when a task's command line holds a Hydra override before `--`, or gives an on/off
    flag a value (`--cpu=false`, which invoke would read as --cpu and a task named 'false')."""
    if Path(argv[0] if argv else "").name not in ("invoke", "inv", "__main__.py"):
        return
    spaced = _namespace_with_a_space(namespace, argv[1:])
    if spaced:
        raise Exit(f"error: invoke names a task of a group with a dot: invoke {spaced}", code=2)
    # A copy: invoke's to_contexts() consumes each task's help texts, which --help still needs.
    parsed = copy.deepcopy(namespace).to_contexts()
    contexts = {name: ctx for ctx in parsed for name in (ctx.name, *ctx.aliases)}
    context, skip = None, False
    words: list[str] = []  # the task's name and flags, as typed
    found: list[str] = []  # the overrides typed before --
    for token in [*argv[1:], "--"]:
        if token == "--":
            break
        if skip:
            skip, words = False, [*words, token]
        elif token in contexts:
            context, words = contexts[token], [token]
        elif token.startswith("-") and context is not None:
            name, equals, _ = token.partition("=")
            flag = context.flags.get(name)
            if flag is not None and not flag.takes_value and equals:
                raise Exit(
                    f"error: {name} is an on/off flag: give {name} alone, or leave it out", 2
                )
            skip = bool(flag is not None and flag.takes_value and not equals)
            words.append(token)
        elif context is not None and OVERRIDE.match(token):
            found.append(token)
        else:
            words.append(token)
    if found and context is not None:
        after = argv[argv.index("--") + 1 :] if "--" in argv else []
        raise Exit(
            f"error: {found[0]!r} is a Hydra override: put overrides after --, as in "
            f"invoke {shlex.join(words)} -- {shlex.join([*found, *after])}",
            code=2,
        )


def _namespace_with_a_space(namespace: Collection, args: list[str]) -> str:
    """`data push X` typed for `data.push X`: the corrected command line, else ''."""
    words = [arg for arg in args if arg != "--"][:2]
    group = namespace.collections.get(words[0]) if len(words) == 2 else None
    if group is not None and words[1] in group.tasks:
        rest = args[args.index(words[1]) + 1 :]
        return shlex.join([f"{words[0]}.{words[1]}", *rest])
    return ""


def help_of_positional_tasks(namespace: Collection, argv: list[str]) -> None:
    """`invoke data.prepare --help` shows the task's help, as `invoke --help data.prepare` does:
    invoke itself would take `--help` for the task's first positional argument (SRC)."""
    args = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    if len(args) < 2 or args[1] not in ("-h", "--help"):
        return
    contexts = {ctx.name: ctx for ctx in copy.deepcopy(namespace).to_contexts()}
    if args[0] in contexts and contexts[args[0]].positional_args:
        shown = subprocess.run([sys.executable, "-m", "invoke", "--help", args[0]], check=False)
        raise Exit(code=shown.returncode)


# Names the tasks had before the template listed each once: `invoke image.build` is `invoke build`.
RENAMED = {f"{group}.{name}": name for group, names in (
    ("image", ("build", "push", "run", "shell", "lock")),
    ("cloud", ("status", "logs", "stop", "gpus")),
) for name in names}  # fmt: skip


def refuse_old_names(argv: list[str]) -> None:
    """One line naming the new name of a task typed by its old one."""
    old = next((arg for arg in argv[1:] if arg in RENAMED), None)
    if old is not None:
        raise Exit(f"error: invoke {old} is now invoke {RENAMED[old]}", code=2)


def check_command_line(namespace: Collection) -> None:
    """The checks above on this process's command line."""
    if Path(sys.argv[0] if sys.argv else "").name in ("invoke", "inv", "__main__.py"):
        refuse_old_names(sys.argv)
        help_of_positional_tasks(namespace, sys.argv)
    refuse_overrides_before_dashes(namespace, sys.argv)


def port(flag: str, value: str) -> int:
    """`value` of `--flag` as a TCP port (1024 to 65535); exit 2 naming the flag otherwise."""
    number = whole_number(flag, value, 1024)
    if number > 65535:
        raise Exit(f"error: {flag} {number}: a port goes up to 65535", code=2)
    return number


def duration(flag: str, value: str) -> float:
    """Seconds in a Prometheus duration of one unit (250ms, 5s, 1m); exit 2 naming the flag."""
    units = {"ms": 0.001, "s": 1, "m": 60}
    for unit in sorted(units, key=len, reverse=True):
        number = value.removesuffix(unit)
        if number != value and number.isdigit() and int(number) > 0:
            return int(number) * units[unit]
    raise Exit(f"error: {flag} {value!r}: give a duration such as 250ms, 5s or 1m", code=2)
