#!/usr/bin/env bash
# The whole test suite, from a fresh clone or an existing checkout:
#   1. installs Debian's Chromium for the browser test when /usr/bin/chromium
#      is missing (needs root, as on CI), in the background while steps 2
#      to 5 run: it waits on the network and the disk, not the CPUs (the
#      browser tests wait for it);
#   2. makes .venv/ (Python 3.11) when it is missing and installs octlm with
#      its test extras into it;
#   3. in web/: installs the page's npm packages (npm ci), type-checks the
#      TypeScript, builds the page into build/web-check/ (pytest compares it
#      with the committed src/octlm/web_dist/) and runs Vitest (the parity
#      tests against Python's fixtures);
#   4. checks the Python is formatted and lint-clean (ruff format --check,
#      ruff check; pinned in the test extras) and fails if not;
#   5. runs pytest, including the browser test, one worker process per CPU
#      on one torch thread each (pyproject's addopts, tests/conftest.py).
#      Extra arguments go to pytest;
#   6. runs the tests marked `rounding` (their results depend on float
#      rounding) again under other CPU kernels (ATEN_CPU_CAPABILITY=default:
#      no AVX2/AVX-512) and another thread count (2 where step 5 took 1), as
#      another machine would.
set -euo pipefail
cd "$(dirname "$0")/.."
chromium_install=""
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "scripts/test.sh: installing Debian's chromium for the browser test (in the background)" >&2
    # The browser tests wait while this file exists and is empty (tests/test_page.py), so pytest need not wait for
    # the whole install; a failed install writes why into it.
    mkdir -p build
    export OCTLM_CHROMIUM_PENDING="$PWD/build/chromium-install-pending"
    : >"$OCTLM_CHROMIUM_PENDING"
    (
      export DEBIAN_FRONTEND=noninteractive
      if apt-get update -qq && apt-get install -y -qq chromium >/dev/null; then
        rm -f "$OCTLM_CHROMIUM_PENDING"
      else
        echo "apt-get install chromium failed (its messages are above)" >"$OCTLM_CHROMIUM_PENDING"
        exit 1
      fi
    ) &
    chromium_install=$!
  else
    echo "scripts/test.sh: /usr/bin/chromium is missing and this is not root; install it with 'sudo apt-get install chromium' (the browser test will fail)" >&2
  fi
fi

PYTHON="${PYTHON:-python3.11}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

(
  cd web
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent check
  OCTLM_WEB_OUT="$PWD/../build/web-check" npx vite build --logLevel warn
  npx vitest run
)

.venv/bin/ruff format --check --quiet . || { echo "scripts/test.sh: run '.venv/bin/ruff format .'" >&2; exit 1; }
.venv/bin/ruff check --quiet . || { echo "scripts/test.sh: fix what ruff check reports (.venv/bin/ruff check --fix . fixes some)" >&2; exit 1; }

.venv/bin/python -m pytest "$@"

if [ -n "$chromium_install" ]; then
  wait "$chromium_install" || { echo "scripts/test.sh: installing chromium failed (apt-get above says why)" >&2; exit 1; }
fi

# Another machine picks other kernels and threads: the rounding-sensitive tests must pass there too. Step 5's workers
# computed on one thread each, so here two threads each, with half as many workers, so that none waits on a busy CPU.
cpus=$(nproc)
threads=2
workers=$((cpus / 2)) # 0 on one CPU: in pytest's own process
echo "scripts/test.sh: the rounding tests again, ATEN_CPU_CAPABILITY=default and $threads threads" >&2
status=0
ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS="$threads" .venv/bin/python -m pytest -q -m rounding -n "$workers" "$@" \
  || status=$?
# 5: the arguments selected no rounding test, which is not a failure
if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then exit "$status"; fi
