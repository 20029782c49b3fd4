"""Serving an exported model (a project's `python -m PACKAGE.serve`): one small HTTP server that
speaks every managed endpoint's container contract and the Open Inference Protocol. The one
thing it takes from the project is how a model folder is opened (model.py, the contract).

    cli.py       the command line a project's serve.py hands its opener to
    model.py     the model folder (invoke export), loaded by the project's opener
    inputs.py    a request's inputs checked, before anything is built from them
    batcher.py   concurrent requests run as one batch, within a latency bound
    metrics.py   Prometheus: requests, errors and latency by route, batch sizes, classes,
                 confidence, and drift.py's PSI of inputs and predictions
    http.py      the routes (SageMaker, Vertex AI, Azure ML, KServe V2), as one ASGI app
    server.py    the server's life: listen, load the model, drain on SIGTERM (uvicorn)
    connections.py  uvicorn's HTTP protocol, with deadlines and a size limit for headers
    v2.py        KServe V2's infer requests and answers
    samples.py   a share of the predictions as JSON lines, copied to a bucket
    buckets.py   Cloud Storage and Blob Storage by their REST APIs (the model in, samples out)

Why uvicorn (with its C parser, httptools, and event loop, uvloop) and no web framework: every
contract here is a handful of routes, and one event loop that reads and answers requests while
the model runs on a thread of its own serves 0.9 of the model's in-process rate at 32 clients
on one core, where the standard library's threaded server served 0.4 (benchmarks/serving.py).
The contracts, from each service's documentation:
    docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html
    cloud.google.com/vertex-ai/docs/predictions/custom-container-requirements
    learn.microsoft.com/azure/machine-learning/how-to-deploy-custom-container
    github.com/kserve/open-inference-protocol (KServe V2)
"""
