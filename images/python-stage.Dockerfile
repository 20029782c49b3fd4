# The Python stage, written once in the template (images/python-stage.Dockerfile) for its base
# images and every project's image.
# NVIDIA's CUDA images carry no Python: take it from Ubuntu, with the deadsnakes archive for the
# versions Ubuntu does not ship. A base that already has $PYTHON (the template's published Python
# bases, a local stand-in) skips this layer's work.
FROM ${BASE_IMAGE} AS python
ARG PYTHON
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN if ! command -v "$PYTHON" >/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends ca-certificates software-properties-common \
      && add-apt-repository -y ppa:deadsnakes/ppa \
      && apt-get install -y --no-install-recommends "$PYTHON" "$PYTHON-venv" \
      && apt-get purge -y --auto-remove software-properties-common \
      && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log; \
    fi
