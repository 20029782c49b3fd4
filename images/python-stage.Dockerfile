# The Python stage, written once in the template (images/python-stage.Dockerfile) for its base
# images and every project's image.
# NVIDIA's CUDA images carry no Python: take it from Ubuntu, with the deadsnakes archive for the
# versions Ubuntu does not ship. A model compiled at run time may need a compiler and Python's
# headers: a framework's compiler builds CPU kernels with g++ against Python.h, and Triton its GPU
# launcher with gcc against the same (g++ brings gcc). g++ and lib$PYTHON-dev without their
# recommends are the smallest set that does (269 MB on Debian 12); their static libpython goes,
# since nothing links Python statically. A base that already has all three (the template's
# published Python bases) skips this layer's work. What apt leaves that differs from build to
# build (its logs, ldconfig's cache of file stats) goes, so that two builds are the same.
FROM ${BASE_IMAGE} AS python
ARG PYTHON
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN if ! command -v g++ >/dev/null || ! "$PYTHON" -c 'import pathlib, sys, sysconfig; \
        sys.exit(not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file())' \
        2>/dev/null; then \
      apt-get update \
      && if ! command -v "$PYTHON" >/dev/null; then \
        apt-get install -y --no-install-recommends ca-certificates software-properties-common \
        && add-apt-repository -y ppa:deadsnakes/ppa \
        && apt-get install -y --no-install-recommends "$PYTHON" "$PYTHON-venv" \
        && apt-get purge -y --auto-remove software-properties-common; \
      fi \
      && apt-get install -y --no-install-recommends g++ "lib$PYTHON-dev" \
      && rm -f /usr/lib/"$PYTHON"/config-*/lib"$PYTHON"*.a /usr/lib/*-linux-gnu/lib"$PYTHON"*.a \
      && apt-get clean \
      && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
        /var/log/alternatives.log /var/cache/ldconfig/aux-cache; \
    fi
