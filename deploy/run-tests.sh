#!/usr/bin/env bash
# Run the test suite; an empty DATABASE_URL means SQLite under var/.
# In parallel with PYTEST_XDIST_WORKERS=N processes (pytest-xdist; unset or 0 runs serially),
# each with a test database, a var/ and a Redis namespace of its own (tests/parallel.py).
# A test file stays on one worker (--dist loadfile): its module fixtures start servers once.
# Arguments of the caller's own -n/--numprocesses (or -p no:xdist) are left as they are.
# pytest exits 5 when it collected no test: that is a broken suite, not a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -z "${DATABASE_URL:-}" ] && unset DATABASE_URL
workers="${PYTEST_XDIST_WORKERS:-0}"  # serial unless asked: see the README
parallel=(-n "$workers" --dist loadfile)
[ "$workers" = 0 ] && parallel=()
for argument in "$@"; do
  case "$argument" in
    -n | -n[0-9]* | --numprocesses | --numprocesses=* | no:xdist) parallel=() ;;
  esac
done
.venv/bin/python -m pytest "${parallel[@]}" "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: the suite is missing or its paths are wrong." >&2
  exit 1
fi
exit "$status"
