"""The model server against the same model in process and against a peer server (LitServe),
in the generated project: a short training run, its export, then the project's own
benchmarks/serving.py (requests per second, p50 and p99 at 1, 8 and 32 clients).

    invoke bench serving            (PyTorch; LitServe is installed beside the project)
    invoke bench serving -- --calls 500
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", required=True, help="a generated project, installed here")
    parser.add_argument("--epochs", type=int, default=3, help="of the run that is exported")
    args, rest = parser.parse_known_args()
    project = Path(args.project)
    package = next(p.parent.name for p in (project / "src").glob("*/serve.py"))
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        for step in (
            ["-m", f"{package}.train", f"trainer.max_epochs={args.epochs}", f"hydra.run.dir={run}"],
            ["-m", f"{package}.export", str(run)],
        ):
            done = subprocess.run([sys.executable, *step], cwd=project, capture_output=True,
                                  text=True)  # fmt: skip
            if done.returncode != 0:
                sys.exit(f"error: {' '.join(step[:2])} failed: {done.stderr.strip()[-500:]}")
        bench = [sys.executable, "benchmarks/serving.py", "--model", str(run / "model"), *rest]
        sys.exit(subprocess.run(bench, cwd=project).returncode)


if __name__ == "__main__":
    main()
