"""Unit tests of template_tools: names, GPUs, variants, pruning, licenses, the answers record."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import TEMPLATE_DIR, commit_all, git

from template_tools import (
    check_package_name,
    check_project_slug,
    check_python,
    choices,
    default_answers,
    frameworks,
    gpus_on,
    license_text,
    prune,
    validate,
    variants,
    write_answers_record,
    write_license,
)
from template_tools.checks import CHOICE_OPTIONS
from template_tools.install import uv_sources
from template_tools.naming import suggest_package_name, suggest_slug
from template_tools.prune import default_rules
from template_tools.record import answers_record, template_source
from template_tools.variants import CYCLED_OPTIONS, PRODUCT_OPTIONS

# --- naming ---


@pytest.mark.parametrize("slug", ["vision", "vision-3d", "a", "cloud-gpu-project", "x1-y2-z3"])
def test_valid_slugs_pass(slug: str) -> None:
    check_project_slug(slug)


@pytest.mark.parametrize(
    ("slug", "rule", "suggestion"),
    [
        ("3d-vision", "must start with a letter", "vision-3d"),
        ("-vision", "must start with a letter", "vision"),
        ("My-Project", "must be lowercase", "my-project"),
        ("my project", "must not contain spaces", "my-project"),
        ("my_project", "single hyphens", "my-project"),
        ("my--project", "single hyphens", "my-project"),
        ("project-", "single hyphens", "project"),
        ("2024", "must start with a letter", "project-2024"),
    ],
)
def test_invalid_slug_names_value_rule_and_fix(slug: str, rule: str, suggestion: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_project_slug(slug)
    message = str(caught.value)
    assert f"project_slug {slug!r}" in message
    assert rule in message
    assert f"pass project_slug={suggestion} " in message
    check_project_slug(suggestion)


def test_the_brief_example_message() -> None:
    with pytest.raises(ValueError, match=r"^project_slug '3d-vision' must start with a letter; "):
        check_project_slug("3d-vision")


@pytest.mark.parametrize("slug", ["", "_empty_"])
def test_empty_slug_blames_the_project_name(slug: str) -> None:
    with pytest.raises(ValueError, match=r"project_slug is empty: project_name '!!!' has no"):
        check_project_slug(slug, project_name="!!!")


@pytest.mark.parametrize("name", ["vision", "vision_3d", "cloud_gpu_project", "torchvision2"])
def test_valid_package_names_pass(name: str) -> None:
    check_package_name(name)


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("3d_vision", "must start with an ASCII letter"),
        ("_private", "must start with an ASCII letter"),
        ("café", "must start with an ASCII letter"),
        ("my pkg", "only lowercase letters, digits and underscores"),
        ("MyPkg", "only lowercase letters, digits and underscores"),
        ("my-pkg", "only lowercase letters, digits and underscores"),
        ("class", "Python keyword"),
        ("match", "Python keyword"),  # a soft keyword
        ("json", "standard-library module"),
        ("typing", "standard-library module"),
        ("torch", "dependency the project imports"),
        ("hydra", "dependency the project imports"),
        ("sklearn", "dependency the project imports"),
        ("", "is empty"),
    ],
)
def test_invalid_package_name_names_value_rule_and_fix(name: str, rule: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_package_name(name)
    message = str(caught.value)
    assert f"package_name {name!r}" in message
    assert rule in message
    suggestion = suggest_package_name(name)
    assert f"pass package_name={suggestion} " in message
    check_package_name(suggestion)


def test_suggestions_keep_the_words() -> None:
    assert suggest_slug("3D Vision!") == "vision-3d"
    assert suggest_package_name("3d_vision") == "vision_3d"
    assert suggest_package_name("json") == "json_project"


# --- GPUs per cloud ---


def test_gpu_catalog_matches_the_clouds_offers() -> None:
    assert gpus_on("aws") == ["t4", "l4", "a10g", "v100", "a100", "a100-80gb", "h100"]
    assert gpus_on("gcp") == ["t4", "l4", "v100", "a100", "a100-80gb", "h100"]
    assert gpus_on("azure") == ["t4", "a10", "v100", "a100", "a100-80gb", "h100"]


def test_every_cloud_and_gpu_choice_is_in_the_catalog() -> None:
    options = choices()
    for cloud in options["default_cloud"]:
        assert set(gpus_on(cloud)) <= set(options["default_gpu"]), cloud
    assert options["default_gpu"][0] in gpus_on(options["default_cloud"][0])


@pytest.mark.parametrize(("cloud", "gpu"), [("gcp", "a10g"), ("azure", "a10g"), ("azure", "l4")])
def test_gpu_not_on_cloud_is_rejected_with_the_valid_list(cloud: str, gpu: str) -> None:
    answers = default_answers(extra_context={"default_cloud": cloud, "default_gpu": gpu})
    with pytest.raises(ValueError) as caught:
        validate(answers)
    message = str(caught.value)
    assert f"default_gpu {gpu!r}" in message
    assert f"default_cloud {cloud!r}" in message
    assert ", ".join(gpus_on(cloud)) in message


def test_a_gpu_older_than_the_frameworks_cuda_is_refused_at_baking() -> None:
    """PyTorch's image is CUDA 13, which builds for compute capability 7.5 and later: a V100
    (7.0) could never run it. TensorFlow's CUDA 12 image still runs there."""
    answers = default_answers(extra_context={"default_cloud": "aws", "default_gpu": "v100"})
    with pytest.raises(ValueError) as caught:
        validate(answers)
    message = str(caught.value)
    assert message.startswith("default_gpu 'v100' (compute capability 7.0) cannot run the pytorch")
    assert "CUDA 13.0 runs on compute capability 7.5 and later; pass default_gpu=t4" in message
    assert "v100" not in message.split("pass ")[1]
    validate({**answers, "framework": "tensorflow"})


def test_default_answers_are_valid() -> None:
    answers = default_answers()
    validate(answers)
    assert answers["project_slug"] == "cloud-gpu-project"
    assert answers["package_name"] == "cloud_gpu_project"


def test_validate_reports_the_slug_before_what_it_derives() -> None:
    answers = default_answers(extra_context={"project_slug": "3d-vision"})
    assert answers["package_name"] == "3d_vision"
    with pytest.raises(ValueError, match=r"^project_slug '3d-vision'"):
        validate(answers)


# --- variants ---


def test_variants_cover_the_product_and_only_valid_answers() -> None:
    options = choices()
    found = variants()
    expected = 1
    for name in PRODUCT_OPTIONS:
        expected *= len(options[name])
    assert len(found) == expected  # with the default GPU, every combination is valid
    assert len({v.id for v in found}) == len(found)
    for v in found:
        assert set(v.extra_context) == {*PRODUCT_OPTIONS, *CYCLED_OPTIONS}
        validate(default_answers(extra_context=v.extra_context))
    for name in CYCLED_OPTIONS:
        assert {v.extra_context[name] for v in found} == set(options[name]), name


def test_variants_drop_invalid_combinations(tmp_path: Path) -> None:
    spec = json.loads((TEMPLATE_DIR / "cookiecutter.json").read_text())
    spec["_choices"]["default_gpu"] = ["a10g"]  # on aws only
    spec["default_gpu"] = "a10g"
    (tmp_path / "cookiecutter.json").write_text(json.dumps(spec))
    found = variants(tmp_path)
    assert found
    assert {v.extra_context["default_cloud"] for v in found} == {"aws"}


def test_choices_read_cookiecutter_json() -> None:
    options = choices()
    assert options["framework"][0] == "pytorch"
    assert "project_name" not in options
    assert "__prompts__" not in options


def test_each_choice_option_defaults_to_its_first_choice_and_its_question_lists_them() -> None:
    spec = json.loads((TEMPLATE_DIR / "cookiecutter.json").read_text())
    assert set(choices()) == set(CHOICE_OPTIONS)
    for option, offered in choices().items():
        assert spec[option] == offered[0], option  # a string: cookiecutter checks no list
        assert spec["__prompts__"][option].endswith(f", one of: {', '.join(offered)}"), option


@pytest.mark.parametrize("option", CHOICE_OPTIONS)
def test_an_answer_outside_its_choices_is_refused_with_them(option: str) -> None:
    answers = default_answers(extra_context={option: "jax"})
    with pytest.raises(ValueError) as caught:
        validate(answers)
    offered = choices()[option]
    assert str(caught.value) == (
        f"{option} 'jax' is not one of {', '.join(offered)}; "
        f"pass {option}={offered[0]} or another of those"
    )


# --- pruning ---


def _tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def _touch(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")


def _tracking_rules() -> list[dict]:
    """prune.json's rules about the tracking answer alone."""
    return [rule for rule in default_rules() if set(rule["when"]) == {"tracking"}]


def test_prune_removes_the_unchosen_files_and_empty_folders(tmp_path: Path) -> None:
    _touch(tmp_path, "configs/logger/wandb.yaml", "configs/train.yaml", "only/wandb.yaml")
    removed = prune(tmp_path, {"tracking": "none"}, _tracking_rules())
    assert removed == [tmp_path / "configs/logger/wandb.yaml"]
    assert _tree(tmp_path) == {"configs", "configs/train.yaml", "only", "only/wandb.yaml"}


def test_prune_keeps_the_files_of_the_chosen_option(tmp_path: Path) -> None:
    _touch(tmp_path, "configs/logger/wandb.yaml", "configs/logger/jsonl.yaml")
    before = _tree(tmp_path)
    assert prune(tmp_path, {"tracking": "wandb"}, _tracking_rules()) == []
    assert _tree(tmp_path) == before


def test_prune_rules_accept_globs_and_folders(tmp_path: Path) -> None:
    rules = [{"when": {"framework": "tensorflow"}, "remove": ["src/pkg/torch_*", "torchdir"]}]
    _touch(tmp_path, "src/pkg/torch_loop.py", "src/pkg/torch_data.py", "torchdir/a/b.py", "k.py")
    assert prune(tmp_path, {"framework": "pytorch"}, rules) == []
    prune(tmp_path, {"framework": "tensorflow"}, rules)
    assert _tree(tmp_path) == {"k.py"}


def test_prune_rule_needs_every_condition(tmp_path: Path) -> None:
    rules = [{"when": {"framework": "tensorflow", "tracking": "none"}, "remove": ["a.py"]}]
    _touch(tmp_path, "a.py")
    assert prune(tmp_path, {"framework": "tensorflow", "tracking": "wandb"}, rules) == []
    assert prune(tmp_path, {"framework": "tensorflow", "tracking": "none"}, rules) == [
        tmp_path / "a.py"
    ]


def test_prune_moves_a_folder_over_the_project_then_removes(tmp_path: Path) -> None:
    rules = [{"when": {"framework": "tensorflow"}, "move": {"_tf": "."},
              "remove": ["src/pkg/torch_only.py", "_pt"]}]  # fmt: skip
    _touch(tmp_path, "src/pkg/data.py", "_pt/src/pkg/loop.py", "_tf/src/pkg/loop.py")
    _touch(tmp_path, "_tf/src/pkg/torch_only.py")  # an overlay's file that a removal still reaches
    (tmp_path / "_tf/src/pkg/loop.py").write_text("keras loop")
    removed = prune(tmp_path, {"framework": "tensorflow"}, rules)
    assert removed == [tmp_path / "src/pkg/torch_only.py", tmp_path / "_pt"]
    assert _tree(tmp_path) == {"src", "src/pkg", "src/pkg/loop.py", "src/pkg/data.py"}
    assert (tmp_path / "src/pkg/loop.py").read_text() == "keras loop"


def test_an_overlay_never_replaces_a_shared_file(tmp_path: Path) -> None:
    rules = [{"when": {}, "move": {"_tf": "."}}]
    _touch(tmp_path, "src/pkg/loop.py", "_tf/src/pkg/loop.py")
    with pytest.raises(FileExistsError, match=r"_tf/src/pkg/loop\.py over the shared src/pkg"):
        prune(tmp_path, {}, rules)


def test_a_move_source_takes_the_answers(tmp_path: Path) -> None:
    rules = [{"when": {}, "move": {"_locks/{framework}-{tracking}": "."}, "remove": ["_locks"]}]
    _touch(tmp_path, "_locks/tensorflow-none/requirements/cpu.txt", "_locks/pytorch-none/x.txt")
    prune(tmp_path, {"framework": "tensorflow", "tracking": "none"}, rules)
    assert _tree(tmp_path) == {"requirements", "requirements/cpu.txt"}


def test_prune_moves_a_single_file(tmp_path: Path) -> None:
    rules = [{"when": {"tracking": "wandb"}, "move": {"extra/w.yaml": "configs/logger/wandb.yaml"}}]
    _touch(tmp_path, "extra/w.yaml")
    prune(tmp_path, {"tracking": "wandb"}, rules)
    assert _tree(tmp_path) == {"configs", "configs/logger", "configs/logger/wandb.yaml"}


def test_prune_names_a_move_source_the_template_lacks(tmp_path: Path) -> None:
    rules = [{"when": {"framework": "tensorflow"}, "move": {"_tf": "."}}]
    with pytest.raises(FileNotFoundError, match="'_tf'"):
        prune(tmp_path, {"framework": "tensorflow"}, rules)


def test_default_rules_leave_no_framework_overlay(tmp_path: Path) -> None:
    pairs = [f"{f}-{t}" for f in choices()["framework"] for t in choices()["tracking"]]
    for framework in choices()["framework"]:
        project = tmp_path / framework
        _touch(project, "_tensorflow/src/pkg/loop.py", "_pytorch/src/pkg/loop.py", "src/pkg/x.py")
        (project / f"_{framework}/src/pkg/loop.py").write_text(framework)
        for pair in pairs:  # each pair's image lock names its pair
            _touch(project, f"_locks/{pair}/requirements/gpu.txt")
            (project / f"_locks/{pair}/requirements/gpu.txt").write_text(pair)
        prune(project, {"framework": framework, "tracking": "wandb"})
        assert not (project / "_tensorflow").exists() and not (project / "_pytorch").exists()
        assert not (project / "_locks").exists()
        assert (project / "src/pkg/loop.py").read_text() == framework
        assert (project / "src/pkg/x.py").is_file()
        assert (project / "requirements/gpu.txt").read_text() == f"{framework}-wandb"


# --- frameworks and Python versions ---


def test_every_framework_choice_supports_every_python_choice() -> None:
    options = choices()
    assert set(options["framework"]) == set(frameworks())
    for framework in options["framework"]:
        for version in options["python_version"]:
            check_python(framework, version)


def test_python_without_framework_wheels_is_rejected() -> None:
    answers = default_answers(extra_context={"framework": "tensorflow"})
    answers["python_version"] = "3.14"  # torch 2.13 has wheels for it, TensorFlow 2.21 none
    answers["_choices"]["python_version"].append("3.14")  # as if the template offered it
    check_python("pytorch", "3.14")
    with pytest.raises(ValueError) as caught:
        validate(answers)
    message = str(caught.value)
    assert "python_version '3.14'" in message and "tensorflow-cpu==2.21.0" in message
    assert "3.10, 3.11, 3.12, 3.13" in message


def test_variants_skip_a_python_the_framework_lacks(tmp_path: Path) -> None:
    spec = json.loads((TEMPLATE_DIR / "cookiecutter.json").read_text())
    spec["_choices"]["python_version"] = ["3.14", "3.13"]
    spec["python_version"] = "3.14"
    (tmp_path / "cookiecutter.json").write_text(json.dumps(spec))
    found = variants(tmp_path)
    assert {v.extra_context["python_version"] for v in found} == {"3.14", "3.13"}
    for v in found:
        if v.extra_context["framework"] == "tensorflow":
            assert v.extra_context["python_version"] == "3.13", v.id


# --- licenses ---


@pytest.mark.parametrize(
    ("name", "first_line", "copyright_line"),
    [
        ("MIT", "MIT License", "Copyright (c) 2031 Ada Lovelace"),
        ("BSD-3-Clause", "BSD 3-Clause License", "Copyright (c) 2031, Ada Lovelace"),
        ("Apache-2.0", "Apache License", "Copyright 2031 Ada Lovelace"),
    ],
)
def test_license_text_fills_author_and_year(name: str, first_line: str, copyright_line: str):
    text = license_text(name, "Ada Lovelace", 2031)
    assert text.splitlines()[0].strip() == first_line
    assert copyright_line in text
    assert "$" not in text
    assert "[yyyy]" not in text


def test_apache_text_is_debians_copy_with_the_notice_filled() -> None:
    debian = Path("/usr/share/common-licenses/Apache-2.0")
    if not debian.exists():
        pytest.skip("no Debian license texts on this machine")
    expected = (
        debian.read_text()
        .lstrip("\n")
        .replace("Copyright [yyyy] [name of copyright owner]", "Copyright 2031 Ada Lovelace")
    )
    assert license_text("Apache-2.0", "Ada Lovelace", 2031) == expected


def test_write_license_uses_this_year_and_skips_proprietary(tmp_path: Path) -> None:
    path = write_license(tmp_path, {"license": "MIT", "author_name": "Ada"})
    assert path == tmp_path / "LICENSE"
    assert f"Copyright (c) {datetime.date.today().year} Ada" in path.read_text()
    path.unlink()
    assert write_license(tmp_path, {"license": "Proprietary", "author_name": "Ada"}) is None
    assert not (tmp_path / "LICENSE").exists()


def test_every_license_choice_has_a_text_or_is_proprietary() -> None:
    for name in choices()["license"]:
        if name != "Proprietary":
            assert license_text(name, "A", 2000)


# --- the answers record ---


@pytest.fixture
def template_checkout(tmp_path: Path) -> Path:
    """A git checkout holding a minimal template with one commit."""
    repo = tmp_path / "tmpl"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "cookiecutter.json").write_text('{"project_name": "x", "project_slug": "x"}')
    commit_all(repo, "template")
    return repo


def _answers(template: str) -> dict[str, str | None]:
    # As the post-gen hook gets them from cookiecutter: keys sorted, run details included.
    return {
        "_checkout": None,
        "_output_dir": "/somewhere",
        "_repo_dir": "/somewhere/else",
        "_template": template,
        "project_name": "Café",
        "project_slug": "cafe",
    }


def test_record_matches_cruft_for_a_local_checkout(template_checkout: Path) -> None:
    record = answers_record(_answers("."), template_checkout)
    commit = git(template_checkout, "rev-parse", "HEAD")
    assert record == {
        "template": str(template_checkout),
        "commit": commit,
        "checkout": None,
        "context": {
            "cookiecutter": {
                "project_name": "Café",
                "project_slug": "cafe",
                "_template": str(template_checkout),
                "_commit": commit,
            }
        },
        "directory": None,
    }
    assert list(record) == ["template", "commit", "checkout", "context", "directory"]
    assert list(record["context"]["cookiecutter"])[-2:] == ["_template", "_commit"]


def test_record_keeps_urls_as_git_clones_them(template_checkout: Path) -> None:
    assert template_source("gh:acme/gpu-template", template_checkout) == (
        "https://github.com/acme/gpu-template.git",
        None,
    )
    url = "https://gitlab.com/acme/t.git"
    assert template_source(url, template_checkout) == (url, None)
    assert template_source(f"git+{url}", template_checkout) == (url, None)


def test_record_of_a_template_in_a_subfolder_names_the_folder(template_checkout: Path) -> None:
    sub = template_checkout / "templates" / "gpu"
    sub.mkdir(parents=True)
    (sub / "cookiecutter.json").write_text("{}")
    commit_all(template_checkout, "second template")
    assert template_source(str(sub), sub) == (str(template_checkout), "templates/gpu")


def test_record_outside_git_has_no_commit(tmp_path: Path) -> None:
    (tmp_path / "cookiecutter.json").write_text("{}")
    record = answers_record(_answers(str(tmp_path)), tmp_path)
    assert record["commit"] is None
    assert record["template"] == str(tmp_path)


def test_write_record_in_cruft_layout_and_never_over_an_existing_one(
    template_checkout: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    path = write_answers_record(project, _answers("."), template_checkout)
    assert path == project / ".cruft.json"
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert '\n  "template": ' in text  # two-space indent, as cruft writes
    assert '"project_name": "Café"' in text  # not \u-escaped, as cruft writes
    path.write_text("mine")
    assert write_answers_record(project, _answers("."), template_checkout) is None
    assert path.read_text() == "mine"


def test_no_record_when_cruft_generates(template_checkout: Path, tmp_path: Path) -> None:
    answers = {**_answers("."), "_commit": "0" * 40}  # cruft adds _commit to the context
    assert write_answers_record(tmp_path, answers, template_checkout) is None
    assert not (tmp_path / ".cruft.json").exists()


# --- installs: uv from pip's sources ---


def test_uv_takes_pips_sources_each_from_the_section_pip_obeys() -> None:
    listed = "\n".join(
        [
            ":env:.cert='/etc/ssl/certs/ca-certificates.crt'",
            ":env:.find-links='/opt/wheels'",
            "global.constraint='/etc/pip/constraints.txt'",
            "global.extra-index-url='file:///a/simple file:///b/simple'",
            "global.find-links='/ignored/for/the/env/one'",
        ]
    )
    assert uv_sources(listed) == [
        *("--extra-index-url", "file:///a/simple", "--extra-index-url", "file:///b/simple"),
        *("--find-links", "/opt/wheels", "--constraint", "/etc/pip/constraints.txt"),
        *("--index-strategy", "unsafe-best-match"),
    ]
    assert uv_sources("global.timeout='60'\n") == [], "no source configured: uv's defaults"


def write_wheel(folder: Path, name: str) -> Path:
    """A one-module wheel, written by hand (building one needs setuptools from an index)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    files = {
        f"{name}.py": "ANSWER = 42\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{name}-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{name}-1.0.dist-info/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel


def test_uv_installs_into_a_venv_from_the_command_line(tmp_path: Path) -> None:
    """`python -m template_tools.install VENV PACKAGE...`, as .ci/run calls it: a wheel found
    only through pip's find-links (PyPI switched off), and one clear line for a call without
    packages."""
    write_wheel(tmp_path / "wheels", "tiny_package")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {**os.environ, "PIP_FIND_LINKS": str(tmp_path / "wheels"), "PIP_NO_INDEX": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "template_tools.install", str(venv), "tiny_package"],
        cwd=TEMPLATE_DIR,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    imported = subprocess.run(
        [venv / "bin" / "python", "-c", "import tiny_package; print(tiny_package.ANSWER)"],
        capture_output=True,
        text=True,
    )
    assert imported.stdout == "42\n", imported.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "template_tools.install", str(venv)],
        cwd=TEMPLATE_DIR,
        capture_output=True,
        text=True,
    )
    assert usage.returncode == 2 and usage.stderr.startswith("usage:")
