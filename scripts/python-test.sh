#!/usr/bin/env bash
# The framework integration tests (integrations/python/tests): each framework's real login code, on its own
# database of the throwaway PostgreSQL, against the built `baton` (its emulator, serve, transfer-ids, exchange);
# first the client's own tests (test_client.py: broken answers from a peer on loopback, no Django).
#
#   scripts/pg.sh run scripts/python-test.sh BATON_BINARY [PYTEST_ARGS…]
#
# Needs BATON_TEST_DATABASE_URL (scripts/pg.sh sets it); the virtual environment comes from scripts/python-env.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
    echo "usage: scripts/pg.sh run scripts/python-test.sh BATON_BINARY [PYTEST_ARGS…] (the binary must exist)" >&2
    exit 2
fi
if [ -z "${BATON_TEST_DATABASE_URL:-}" ]; then
    echo "python-test.sh: BATON_TEST_DATABASE_URL is not set; run it under scripts/pg.sh" >&2
    exit 2
fi
export BATON_BINARY
BATON_BINARY=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
python=$("$root/scripts/python-env.sh")
cd "$root/integrations/python/tests"
status=0
for framework in client allauth social; do
    echo "== $framework" >&2
    BATON_TEST_FRAMEWORK=$framework "$python" -m pytest -p no:cacheprovider -q "test_$framework.py" "$@" || status=1
done
exit $status
