#!/usr/bin/env bash
# The whole test suite, from a fresh clone or an existing checkout: makes
# .venv/ (Python 3.11) when it is missing, installs octlm with its test
# extras into it, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest "$@"
