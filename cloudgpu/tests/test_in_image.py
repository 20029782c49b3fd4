"""What a project's images get of this package (in_image.py): every file, with sums the
image's `sha256sum --check` takes, and never a file changed since pip installed the release."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cloudgpu import in_image

SOURCE = Path(in_image.__file__).resolve().parents[1]  # cloudgpu/src
PACKAGE = SOURCE.parent


def test_the_staged_package_is_every_file_and_sha256sum_checks_each(tmp_path: Path) -> None:
    into = tmp_path / "build" / "cloudgpu"
    count = in_image.stage(into)
    staged = sorted(p.relative_to(into).as_posix() for p in into.rglob("*") if p.is_file())
    assert count == len(staged) - 1 > 50  # and SHA256SUMS
    assert "cloudgpu/serving/server.py" in staged and "cloudgpu/catalog.json" in staged
    assert not [name for name in staged if "__pycache__" in name or name.endswith(".pyc")]
    check = ["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"]
    assert subprocess.run(check, cwd=into).returncode == 0
    served = into / "cloudgpu" / "serving" / "inputs.py"
    served.write_text(served.read_text() + "# changed\n")
    done = subprocess.run(check, cwd=into, capture_output=True, text=True)
    assert done.returncode == 1 and "cloudgpu/serving/inputs.py: FAILED" in done.stdout


@pytest.mark.slow
def test_a_file_changed_since_pip_installed_the_release_is_refused(tmp_path: Path) -> None:
    """A real install (the wheel of this checkout, pip's RECORD beside it): staged as it is,
    and refused in one line once one of its files differs from what pip recorded."""
    wheels = tmp_path / "wheels"
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "build", "-q", "--wheel", "--out-dir", str(wheels), str(PACKAGE)],
                   check=True)  # fmt: skip
    target = tmp_path / "site"
    subprocess.run([*uv, "pip", "install", "-q", "--no-deps", "--target", str(target),
                    *map(str, wheels.glob("*.whl"))], check=True)  # fmt: skip
    shutil.rmtree(target / "cloudgpu" / "__pycache__", ignore_errors=True)
    code = ("import sys; from pathlib import Path; from cloudgpu import in_image\n"
            "try: in_image.stage(Path(sys.argv[1]))\n"
            "except in_image.StagingError as error: sys.exit(str(error))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(target)}
    stage = [sys.executable, "-c", code, str(tmp_path / "staged")]
    assert subprocess.run(stage, env=env, capture_output=True).returncode == 0
    assert (tmp_path / "staged" / "cloudgpu" / "serving" / "http.py").is_file()
    changed = target / "cloudgpu" / "serving" / "http.py"
    changed.write_text(changed.read_text() + "# changed\n")
    done = subprocess.run(stage, env=env, capture_output=True, text=True)
    assert done.returncode == 1
    version = in_image.cloudgpu.__version__
    wanted = f"{changed} is not the file pip installed with cloudgpu {version}: reinstall it"
    assert done.stderr.strip() == wanted + " (invoke setup)"


def test_a_pin_of_another_release_is_refused() -> None:
    version = in_image.cloudgpu.__version__
    in_image.check_pin(f'"cloudgpu=={version}",')
    in_image.check_pin('"cloudgpu @ file:///somewhere/cloudgpu",')
    with pytest.raises(in_image.StagingError, match=r"pins cloudgpu 9\.9\.9 and this environment"):
        in_image.check_pin(
            '"cloudgpu @ git+https://github.com/o/r@cloudgpu-v9.9.9#subdirectory=cloudgpu",'
        )


def test_python_m_in_image_stages_what_a_workflow_builds_and_refuses_another_pin(
    tmp_path: Path,
) -> None:
    """As the project's image workflow runs it, in the project's folder."""
    env = {**os.environ, "PYTHONPATH": str(SOURCE)}
    command = [sys.executable, "-m", "cloudgpu.in_image"]
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'dev = ["cloudgpu=={in_image.cloudgpu.__version__}",]\n')
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"staged cloudgpu {in_image.cloudgpu.__version__} in build/")
    assert (tmp_path / "build/cloudgpu/SHA256SUMS").is_file()
    pyproject.write_text('dev = ["cloudgpu==9.9.9",]\n')
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: pyproject.toml pins cloudgpu 9.9.9 and this environment has "
        f"{in_image.cloudgpu.__version__}: run invoke setup"
    )
