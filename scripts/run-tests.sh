#!/usr/bin/env bash
# The test entry point (CI runs it through .ci/run): make the machine ready
# (scripts/install-test-deps.sh), then run the whole suite. Exits with pytest's
# code; "no tests collected" (5) is a failure too. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-test-deps.sh

VENV="${NEFOS_VENV:-/opt/nefos-venv}"
# With PYTHONDONTWRITEBYTECODE set (some machines' images set it), pytest rewrites and compiles
# every test module again in each of its processes: twice the CPU of collecting from its cache.
unset PYTHONDONTWRITEBYTECODE
set +e
# Four processes on the two cores of the project's machines: much of a test's time is waiting (for
# its cloud, a guest, a deadline the shipped options set), and three left a quarter of the CPU idle;
# the units of work are chosen so that nothing the machine has only one of is used by two at once
# (tests/conftest.py). NEFOS_TEST_WORKERS=0: one process.
"$VENV/bin/python" -m pytest tests/ -q -p no:cacheprovider -n "${NEFOS_TEST_WORKERS:-4}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests; counting that as a failure" >&2
fi
exit "$rc"
