"""Check each answer while cookiecutter or cruft asks the questions, before the next one.

Cookiecutter has no hook per answer. It does render every question's default with Jinja, from the
answers given so far, in an environment that loads the extensions cookiecutter.json lists under
`_extensions` (cookiecutter and cruft both put the template folder on sys.path for that). This
extension checks those answers at each such render, so a bad one is caught before the next
question and before any file or folder exists:

- typed at a question: the rule and an example are shown, and that question is asked again;
- given on the command line (`--no-input`): one line in that command's syntax, exit status 2.

Through the Python API (`cookiecutter()`, as `invoke bake` and the tests call it) it checks
nothing: those callers validate the answers themselves, and the pre-generation hook does too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from jinja2 import Environment, Template
from jinja2.ext import Extension

from template_tools.checks import check_given
from template_tools.errors import CRUFT, KEY_VALUE, PROMPT, AnswerError

# The command-line programs whose questions this extension takes over.
CLIS = ("cookiecutter", "cruft")
COOKIECUTTER_JSON = Path(__file__).resolve().parent.parent / "cookiecutter.json"


def _cli() -> str | None:
    """'cookiecutter' or 'cruft' when this process is that program's command line, else None."""
    main = sys.modules.get("__main__")
    path = Path(getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else ""))
    for name in CLIS:
        if name in (path.stem, path.parent.name):  # the console script, or `python -m NAME`
            return name
    return None


def _ask_again(answers: MutableMapping[str, Any], error: AnswerError) -> None:
    """Show the rule and ask again, offering only the valid values where they are a list."""
    from cookiecutter.prompt import read_user_choice, read_user_variable

    prompts = json.loads(COOKIECUTTER_JSON.read_text(encoding="utf-8")).get("__prompts__", {})
    print(f"  {error.message(PROMPT)}", file=sys.stderr)
    if error.choices:
        answers[error.option] = read_user_choice(error.option, error.choices, prompts)
    else:
        answers[error.option] = read_user_variable(error.option, error.example, prompts)


def check_answers(answers: MutableMapping[str, Any]) -> None:
    """Check the answers given so far, in the way this process was asked for them."""
    cli = _cli()
    while cli is not None:
        try:
            check_given(answers)
            return
        except AnswerError as error:
            if "--no-input" not in sys.argv:
                _ask_again(answers, error)
                continue
            syntax = CRUFT if cli == "cruft" else KEY_VALUE
            print(f"error: {error.message(syntax)}", file=sys.stderr)
            raise SystemExit(2) from None


class CheckAnswers(Extension):
    """Checks `cookiecutter.*` before each render of a template made with `from_string`."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        make = environment.from_string

        def from_string(source: Any, *args: Any, **kwargs: Any) -> Template:
            template = make(source, *args, **kwargs)
            template.render = _checked(template.render)  # type: ignore[method-assign]
            return template

        environment.from_string = from_string  # type: ignore[method-assign]


def _checked(render: Callable[..., str]) -> Callable[..., str]:
    def checked_render(*args: Any, **kwargs: Any) -> str:
        answers = kwargs.get("cookiecutter")
        if isinstance(answers, MutableMapping):
            check_answers(answers)
        return render(*args, **kwargs)

    return checked_render
