"""The tasks a project's tasks.py declares (namespace.py): `invoke --list`, `invoke <task> --help`.

Hydra overrides go after `--`: `invoke train -- model=cnn trainer.max_epochs=5`.
Tasks import only the standard library, so `invoke --list` stays instant; the heavy imports
happen in the processes they start.

    run.py      setup, train (here, or --cloud=...), evaluate, export, crossval, sweep
    serving.py  serve: an exported model here, or in the serving image on Docker
    dev.py      test, lint, format
    image.py    the training image: build, push (to a cloud's registry too), run, shell, lock
    remote_plan.py remote_run.py machine_flags.py
                invoke train --cloud=...: the plan, its price and the question; the VM or job
                started and followed (cloudgpu.providers, .managed); the machine the
                flags choose
    remote.py   the cloud runs: status, logs, stop
    offers.py   what they can run on: machines (CPU and GPU), gpus
    estimate.py profiling.py loopback.py
                invoke estimate: the run profiled here, then its time and cost on N machines
                of each type (cloudgpu.estimate's model)
    managed.py  jobs of the clouds' training services (--backend=managed|skypilot)
    endpoints.py   a trained run on a managed endpoint: deploy, endpoints, predict, undeploy
    data.py     datasets: shards for data=shards (data.prepare), to the bucket (data.push)
    gpu_check.py   invoke gpu-check: on an NVIDIA GPU, the GPU tests and benchmark, one report
    monitor.py  Prometheus, a Pushgateway and node_exporter for the runs here, and a cloud run's
                metrics through its tunnel (invoke monitor [--run ID])
    frameworks/    what differs between frameworks (install, multi-device launch, index)
    namespace.py   every task, as invoke lists them
    project.py  what the tasks know of the project: its pyproject.toml [tool.cloudgpu]
"""
