#!/usr/bin/env bash
# Run the test suite; an empty DATABASE_URL means SQLite under var/.
# pytest exits 5 when it collected no test: that is a broken suite, not a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -z "${DATABASE_URL:-}" ] && unset DATABASE_URL
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: the suite is missing or its paths are wrong." >&2
  exit 1
fi
exit "$status"
