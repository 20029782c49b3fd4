"""The GPU check: what no CPU test can show, on one NVIDIA GPU, in one report (text and JSON),
within 8 minutes on an H100/H200-class GPU. Standard library only, so it runs in the image.

    invoke gpu-check                           # inside the GPU image (builds it if missing)
    invoke gpu-check --here                    # in this environment (`invoke setup` on the GPU box)
    python benchmarks/gpu_check.py --out DIR   # what both run
    python benchmarks/gpu_check.py --device cpu --out DIR   # a rehearsal on the CPU (the tests)

Steps, each with a time limit: the machine (GPUs, driver, {{ "torch" if cookiecutter.framework == "pytorch" else "TensorFlow" }} and its CUDA); the
project's `gpu`-marked tests (mixed precision, SIGTERM and resume on the GPU, CUDA's sync check
where the framework has one, several GPUs where there are several); benchmarks/gpu.py (the
Trainer beside a bare loop, bf16, compiled and not, in memory and streamed, the GPU's busy
share). The report says which targets were met. Exit 0: every step ran and every test that ran
passed; 1: something failed; 2: no GPU here (nothing run).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORK = "{{ cookiecutter.framework }}"
# Seconds per step: 8 minutes in all, the image's start aside.
LIMITS = {"machine": 60, "tests": 180, "benchmark": 240}
# The targets the README states, read from the compute-bound row (in memory, compiled, bf16).
TRAINER_OVER_BARE = 0.98
GPU_BUSY_PCT = 90.0
TAIL = 3000  # characters of a failed step's output kept in the report

# What the framework sees: printed as one JSON line by a process of its own.
FRAMEWORK_FACTS = """
{%- if cookiecutter.framework == "pytorch" %}
import json, torch
cuda = torch.cuda.is_available()
print(json.dumps({
    "framework": f"torch {torch.__version__}",
    "cuda": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version() if cuda else None,
    "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    "capability": ".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None,
}))
{%- else %}
import json, tensorflow as tf
info = tf.sysconfig.get_build_info()
gpus = tf.config.list_physical_devices("GPU")
details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
print(json.dumps({
    "framework": f"tensorflow {tf.__version__}",
    "cuda": info.get("cuda_version"),
    "cudnn": info.get("cudnn_version"),
    "devices": [tf.config.experimental.get_device_details(g).get("device_name") for g in gpus],
    "capability": ".".join(map(str, details.get("compute_capability", ()))) or None,
}))
{%- endif %}
"""


def run_step(name: str, command: list[str], env: dict[str, str]) -> dict:
    """Run one step under its time limit, keeping the end of what it printed."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LIMITS[name]
        )
        status = "passed" if done.returncode == 0 else f"failed (exit {done.returncode})"
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as stopped:
        status = f"stopped after its {LIMITS[name]} s"
        stdout, stderr = _text(stopped.stdout), _text(stopped.stderr)
    step = {"name": name, "command": command, "status": status}
    step["seconds"] = round(time.monotonic() - started, 1)
    step["output"] = (stdout + stderr)[-TAIL:]
    step["last_line"] = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    return step


def _text(value: bytes | str | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


def machine(env: dict[str, str]) -> tuple[dict, dict]:
    """The GPUs as nvidia-smi lists them and as the framework sees them."""
    facts: dict = {"gpus": []}
    if shutil.which("nvidia-smi"):
        query = "index,name,uuid,driver_version,memory.total,compute_cap"
        listed = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        keys = query.split(",")
        facts["gpus"] = [
            dict(zip(keys, (value.strip() for value in line.split(",")), strict=False))
            for line in listed.stdout.splitlines()
        ]
    step = run_step("machine", [sys.executable, "-c", FRAMEWORK_FACTS], env)
    if step["status"] == "passed":
        try:
            facts.update(json.loads(step.pop("last_line")))
        except json.JSONDecodeError:
            step["status"] = "failed (printed no JSON)"
    return facts, step


def test_results(junit: Path) -> dict:
    """passed, failed and skipped tests from pytest's JUnit XML, each failure and skip by name."""
    counts: dict = {"passed": [], "failed": [], "skipped": []}
    if not junit.is_file():
        return counts
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next((child for child in case if child.tag in ("failure", "error")), None)
        skipped = case.find("skipped")
        if outcome is not None:
            counts["failed"].append(f"{name}: {outcome.get('message', '')[:300]}")
        elif skipped is not None:
            counts["skipped"].append(f"{name}: {skipped.get('message', '')}")
        else:
            counts["passed"].append(name)
    return counts


def targets(benchmark: dict | None, on_gpu: bool) -> list[dict]:
    """The targets, met or not, from the compute-bound row; none from a rehearsal."""
    rows = [row for row in (benchmark or {}).get("rows", []) if row["data"] == "in memory"]
    row = next((r for r in rows if r["compiled"]), rows[0] if rows else None)
    if not on_gpu or row is None:
        return []
    busy = row["gpu_busy_trainer_pct"]
    return [
        {"target": f"Trainer / bare loop >= {TRAINER_OVER_BARE}", "value": row["trainer_over_bare"],
         "met": row["trainer_over_bare"] >= TRAINER_OVER_BARE},
        {"target": f"GPU busy under the Trainer >= {GPU_BUSY_PCT:.0f}%", "value": busy,
         "met": busy is not None and busy >= GPU_BUSY_PCT},
    ]  # fmt: skip


def gpu_test_modules() -> list[str]:
    """The test modules with GPU tests. Only they are collected: the image has neither the
    cloudgpu package nor the tasks, which the other modules import."""
    tests = sorted((ROOT / "tests").glob("test_*.py"))
    return [str(path.relative_to(ROOT)) for path in tests if "mark.gpu" in path.read_text()]


def check(device: str, out: Path) -> dict:
    """Every step, in order; the report as a dict."""
    on_gpu = device == "cuda"
    # src ahead of what the caller put on the path (a machine's extra packages stay importable)
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    facts, machine_step = machine(env)
    junit = out / "tests.xml"
    tests = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rA", "-p", "no:cacheprovider",
             f"--junitxml={junit}", *gpu_test_modules()]  # fmt: skip
    # On a GPU, several at once where pytest-xdist is there: each trains in processes of its own,
    # and one GPU holds them all (the compiles, on the CPU, are most of their time). A rehearsal
    # skips them all: workers would only cost their start.
    parallel = on_gpu and importlib.util.find_spec("xdist") is not None
    tests[3:3] = ["-n", "4"] if parallel else ["-p", "no:xdist"]
    tests_step = run_step("tests", tests, env)
    bench_json = out / "benchmark.json"
    bench = [sys.executable, "benchmarks/gpu.py", f"--json={bench_json}", f"--device={device}"]
    if not on_gpu:
        bench += ["--quick", "--compile=no", "--precision=fp32"]  # a CPU takes minutes otherwise
    bench_step = run_step("benchmark", bench, env)
    for step in (tests_step, bench_step):
        step.pop("last_line")
    benchmark = json.loads(bench_json.read_text()) if bench_json.is_file() else None
    results = test_results(junit)
    return {
        "device": device,
        "rehearsal": not on_gpu,
        "machine": facts,
        "steps": [machine_step, tests_step, bench_step],
        "tests": results,
        "benchmark": benchmark,
        "targets": targets(benchmark, on_gpu),
        "ok": all(step["status"] == "passed" for step in (machine_step, tests_step, bench_step))
        and not results["failed"],
    }


def render(report: dict) -> str:
    """The report as text: what ran where, for how long, and what it showed."""
    facts = report["machine"]
    lines = [f"GPU check of {ROOT.name} ({FRAMEWORK})"]
    if report["rehearsal"]:
        lines.append("A REHEARSAL ON THE CPU: nothing here was measured on a GPU.")
    for gpu in facts["gpus"]:
        lines.append(
            f"GPU {gpu.get('index')}: {gpu.get('name')}, {gpu.get('memory.total')}, compute "
            f"{gpu.get('compute_cap')}, driver {gpu.get('driver_version')}"
        )
    if "framework" in facts:
        lines.append(f"{facts['framework']}, CUDA {facts['cuda']}, cuDNN {facts['cudnn']}")
    lines.append("")
    for step in report["steps"]:
        lines.append(f"{step['name']:<10} {step['status']:<24} {step['seconds']:>7.1f} s")
    tests = report["tests"]
    lines.append(
        f"\ntests: {len(tests['passed'])} passed, {len(tests['failed'])} failed, "
        f"{len(tests['skipped'])} skipped"
    )
    lines += [f"  FAILED {line}" for line in tests["failed"]]
    lines += [f"  skipped {line}" for line in tests["skipped"]]
    benchmark = report["benchmark"]
    if benchmark:
        lines.append(f"\n{benchmark['title']}, {benchmark['precision']}, CNN "
                     f"{benchmark.get('channels')}, batch {benchmark['batch_size']}, "
                     f"{benchmark['samples']} samples")  # fmt: skip
        lines.append(f"{'data':<10} {'compiled':<9} {'bare/s':>9} {'Trainer/s':>10} "
                     f"{'ratio':>7} {'busy bare':>10} {'busy Trainer':>13}")  # fmt: skip
        for row in benchmark["rows"]:
            busy = [row["gpu_busy_bare_pct"], row["gpu_busy_trainer_pct"]]
            shown = [f"{value:.0f}%" if value is not None else "n/a" for value in busy]
            lines.append(
                f"{row['data']:<10} {'yes' if row['compiled'] else 'no':<9} "
                f"{row['bare_samples_per_s']:>9.0f} {row['trainer_samples_per_s']:>10.0f} "
                f"{row['trainer_over_bare']:>7.3f} {shown[0]:>10} {shown[1]:>13}"
            )
    for target in report["targets"]:
        lines.append(f"{'met' if target['met'] else 'MISSED':<7} {target['target']} "
                     f"(measured {target['value']})")  # fmt: skip
    for step in report["steps"]:
        if step["status"] != "passed":
            lines += ["", f"--- {step['name']}: the end of its output ---", step["output"]]
    lines.append(f"\n{'OK' if report['ok'] else 'FAILED'}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check", help="the report's folder (made)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a rehearsal of every step on the CPU")  # fmt: skip
    args = parser.parse_args()
    if args.device == "cuda" and not shutil.which("nvidia-smi"):
        print("error: no NVIDIA GPU here (nvidia-smi not found); --device cpu rehearses the "
              "check on the CPU")  # fmt: skip
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    report = check(args.device, out)
    text = render(report)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "report.txt").write_text(text, encoding="utf-8")
    print(text, end="")
    print(f"report: {out / 'report.txt'} and report.json")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
