"""The cloudgpu package as projects get it: one wheel of this checkout, with its version and its
data files; and the pin a baked project carries, which follows where the template came from."""

from __future__ import annotations

import shutil
import tomllib
import zipfile
from pathlib import Path

from conftest import TEMPLATE_DIR
from helpers.venvs import package_wheel

from template_tools import package


def test_the_wheel_has_the_packages_version_and_its_data_files() -> None:
    wheel = package_wheel()
    assert wheel.name == f"cloudgpu-{package.version()}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("catalog.json", "machines.json", "endpoints.json", "vm/startup.sh", "py.typed"):
        assert f"cloudgpu/{data}" in names, f"{data} is missing from the wheel"
    assert not any(name.startswith("tests/") for name in names), "the tests stay in the repository"


def test_a_project_baked_from_this_clone_pins_its_package_folder(default_project: Path) -> None:
    meta = tomllib.loads((default_project / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    pins = [r for group in extras.values() for r in group if r.startswith("cloudgpu")]
    assert pins == [f"cloudgpu @ {(TEMPLATE_DIR / 'cloudgpu').resolve().as_uri()}"]
    assert package.PLACEHOLDER not in (default_project / "pyproject.toml").read_text()


def test_a_project_from_a_git_url_pins_the_releases_tag() -> None:
    tag = f"cloudgpu-v{package.version()}"
    assert package.requirement("gh:acme/gpu-template", TEMPLATE_DIR) == (
        f"cloudgpu @ git+https://github.com/acme/gpu-template.git@{tag}#subdirectory=cloudgpu"
    )
    assert package.requirement("git@github.com:acme/t.git", TEMPLATE_DIR) == (
        f"cloudgpu @ git+ssh://git@github.com/acme/t.git@{tag}#subdirectory=cloudgpu"
    )


def test_a_release_on_pypi_is_pinned_by_its_version(tmp_path: Path) -> None:
    template = tmp_path / "template"
    shutil.copytree(
        TEMPLATE_DIR / "cloudgpu", template / "cloudgpu", ignore=shutil.ignore_patterns("tests")
    )
    settings = template / "cloudgpu" / "pyproject.toml"
    settings.write_text(settings.read_text().replace("on-pypi = false", "on-pypi = true"))
    assert package.requirement("gh:acme/gpu-template", template) == f"cloudgpu=={package.version()}"
    assert package.requirement(str(template), template) == f"cloudgpu=={package.version()}"
