#!/usr/bin/env bash
# Install the cell's repaired wheel into the package prefix: the conda package is made from the same wheel as
# the pip artifact (one compile per cell). TORCHBUILD_WHEEL comes from build/script_env in meta.yaml.
set -euo pipefail
: "${TORCHBUILD_WHEEL:?TORCHBUILD_WHEEL is not set: render the recipe with 'python pipeline.py plan' first}"
# The path is relative to the pipeline's working directory; conda-build runs this script elsewhere.
if [ -n "${TORCHBUILD_ROOT:-}" ]; then TORCHBUILD_WHEEL="${TORCHBUILD_ROOT}/${TORCHBUILD_WHEEL}"; fi
"${PYTHON}" -m pip install --no-deps --no-index --no-build-isolation --no-compile "${TORCHBUILD_WHEEL}"
