#!/usr/bin/env bash
# The transformers tests (tests/test_hf.py, tests/test_hf_neox.py, tests/test_hf_hybrid.py) under the
# oldest transformers the `hf` extra allows, in a venv of its own
# (build/transformers-oldest/), since CI installs the newest one.
#
# CI does not run this: tests/test_hf_neox.py's
# test_each_transformers_version_reads_the_same_rope_from_the_export checks,
# under any version, that the keys transformers 4 reads carry the whole RoPE.
# Run it after changing what export-hf or import-hf write or read. Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
# "transformers>=4.53" in the hf extra -> transformers==4.53.*
oldest=$(sed -n 's/^hf = \["transformers>=\([0-9]*\.[0-9]*\)"\]$/\1/p' pyproject.toml)
if [ -z "$oldest" ]; then
  echo "scripts/test_oldest_transformers.sh: no 'hf = [\"transformers>=X.Y\"]' line in pyproject.toml" >&2
  exit 1
fi
venv=build/transformers-oldest
if [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]' "transformers==$oldest.*"
"$venv/bin/python" -c 'import transformers; print("transformers", transformers.__version__)'
exec "$venv/bin/python" -m pytest -p no:cacheprovider tests/test_hf.py tests/test_hf_neox.py tests/test_hf_hybrid.py "$@"
