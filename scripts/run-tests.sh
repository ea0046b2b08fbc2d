#!/usr/bin/env bash
# The test entry point (CI runs it through .ci/run): make the machine ready
# (scripts/install-test-deps.sh), then run the whole suite. Exits with pytest's
# code; "no tests collected" (5) is a failure too. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-test-deps.sh

VENV="${NEFOS_VENV:-/opt/nefos-venv}"
set +e
"$VENV/bin/python" -m pytest tests/ -q -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests; counting that as a failure" >&2
fi
exit "$rc"
