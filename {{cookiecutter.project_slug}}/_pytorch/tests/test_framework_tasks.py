"""What the tasks do for PyTorch alone: the CPU index of its install and of its CPU image."""

from __future__ import annotations

import pytest
from invoke import MockContext, Result

from tasks import framework, run


def test_setup_adds_the_cpu_index_only_where_it_resolves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An index whose host has no address would make pip retry it for minutes."""
    commands = {}
    for index in ("https://localhost/whl/cpu", "https://pytorch.invalid/whl/cpu"):
        monkeypatch.setattr(framework, "CPU_INDEX", index)
        context = MockContext(run=Result(), repeat=True)
        run.setup(context, cpu=True)
        commands[index] = context.run.call_args.args[0]
    resolves, unresolved = commands.values()
    assert "--extra-index-url https://localhost/whl/cpu -e '.[dev]'" in resolves
    assert "--extra-index-url" not in unresolved
    assert "https://pytorch.invalid/whl/cpu does not resolve" in capsys.readouterr().out


def test_the_cpu_image_takes_torch_from_the_cpu_index_or_the_wheelhouse() -> None:
    assert framework.image_build_args(cpu=True, find_links="") == {
        "EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cpu"
    }
    assert framework.image_build_args(cpu=True, find_links="http://wheels/") == {
        "EXTRA_INDEX_URL": ""
    }
    assert framework.image_build_args(cpu=False, find_links="") == {"EXTRA_INDEX_URL": ""}
