"""Sets the Django project up before the tests are collected: a database of its own on the throwaway
PostgreSQL, created by the frameworks' real migrations, then Baton's tables (`baton db migrate`). The client's
own tests (BATON_TEST_FRAMEWORK=client, test_client.py) need neither."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402


def pytest_configure(config):
    framework = harness.required_env("BATON_TEST_FRAMEWORK")
    if framework == "client":
        return
    name = f"baton_python_{framework}"
    with psycopg.connect(harness.required_env("BATON_TEST_DATABASE_URL"), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    url = harness.database_url(name)
    os.environ["BATON_TEST_DJANGO_URL"] = url
    os.environ["BATON_TEST_DJANGO_DB"] = json.dumps(harness.django_database(url))
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    migrate = subprocess.run([harness.baton_binary(), "db", "migrate", "--database-url", url], capture_output=True, text=True)
    if migrate.returncode != 0:
        raise RuntimeError(f"baton db migrate failed: {migrate.stderr}")
