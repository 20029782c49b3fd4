"""Serving an exported model (`python -m PACKAGE.serve`): one small HTTP server that speaks every
managed endpoint's container contract and the Open Inference Protocol.

    model.py     the model folder (invoke export): load it, check a request's inputs
    batcher.py   concurrent requests run as one batch, within a latency bound
    metrics.py   Prometheus: requests, errors and latency by route, batch sizes, classes,
                 confidence, and drift.py's PSI of inputs and predictions
    http.py      the routes (SageMaker, Vertex AI, Azure ML, KServe V2), readiness, draining
    v2.py        KServe V2's infer requests and answers
    samples.py   a share of the predictions as JSON lines, copied to a bucket
    buckets.py   Cloud Storage and Blob Storage by their REST APIs (the model in, samples out)

Why the standard library's threaded HTTP server and not a framework: nothing to install beside
the model's own framework (a small image), well under a millisecond of overhead per request on
the default model, and every contract here is a handful of routes. The facts behind the routes:
../shared/facts/monitoring-and-serving.md, Part 2.
"""
