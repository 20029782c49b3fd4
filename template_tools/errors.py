"""A bad answer: what is wrong with it, and the fix, said in the syntax the user answered in."""

from __future__ import annotations

import json
from collections.abc import Sequence

# How an answer was given, which decides how the fix is spelled.
KEY_VALUE = "key=value"  # cookiecutter --no-input ... key=value, invoke bake key=value
CRUFT = "cruft"  # cruft create --extra-context '{"key": "value"}'
PROMPT = "prompt"  # typed at a question


class AnswerError(ValueError):
    """An answer that would make a broken project.

    `problem` names the option, the value and the rule; `example` is a valid value for `option`
    (the first of `choices` when the valid values are a list); `otherwise` the other way out.
    `str()` spells the fix in key=value syntax; `message(syntax)` in another.
    """

    def __init__(
        self,
        problem: str,
        option: str,
        example: str,
        otherwise: str = "or another name",
        choices: Sequence[str] = (),
    ) -> None:
        self.problem, self.option, self.example = problem, option, example
        self.otherwise, self.choices = otherwise, list(choices)
        super().__init__(self.message(KEY_VALUE))

    def message(self, syntax: str) -> str:
        """The whole one-line message, its fix spelled in `syntax`."""
        if syntax == PROMPT:
            fix = f"answer {self.example}"
        elif syntax == CRUFT:
            fix = f"pass --extra-context '{json.dumps({self.option: self.example})}'"
        else:
            fix = f"pass {self.option}={self.example}"
        return f"{self.problem}; {fix} {self.otherwise}"
