#!/usr/bin/env bash
# The Python virtual environment of the framework integration tests (integrations/python): Django,
# django-allauth, social-auth-app-django, psycopg and pytest from PyPI, plus baton_login itself (editable).
#
#   scripts/python-env.sh        create or update .build/python-venv; prints its python
#
# Idempotent: the packages are installed again only when integrations/python/requirements-test.txt or
# pyproject.toml changed (their checksum is kept in the venv). Python comes from Debian's python3 and
# python3-venv (scripts/install-deps.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.build/python-venv"
requirements="$root/integrations/python/requirements-test.txt"
python=${BATON_PYTHON:-/usr/bin/python3}

stamp=$(cat "$requirements" "$root/integrations/python/pyproject.toml" | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.baton-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$venv/bin/python"
    exit 0
fi
if [ ! -x "$python" ]; then
    echo "python-env.sh: $python not found; run scripts/install-deps.sh" >&2
    exit 2
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e "$root/integrations/python" >&2
echo "$stamp" >"$venv/.baton-stamp"
echo "$venv/bin/python"
