"""CPU scaling beside `invoke estimate`'s prediction, as a project runs it: bake a project, build
its CPU image on the tests' stand-in base, and run the project's own benchmarks/cpu_scaling.py
(1 and 2 threads, 1 and 2 nodes as containers, each measured beside the prediction from the
profile `invoke estimate` takes; targets: 2 threads 1.7x one, predictions within 25%).

    python benchmarks/cpu_scaling.py [--framework pytorch|tensorflow] [-- project script arguments]

It needs a Docker engine with a BuildKit client (tests/helpers/engine.py).
"""

from __future__ import annotations

from scaling import main

if __name__ == "__main__":
    main("cpu_scaling.py")
