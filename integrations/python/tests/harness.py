"""The real components the integration tests drive: `baton emulator`, `baton serve` and the other commands of
the built binary (BATON_BINARY), and the throwaway PostgreSQL of scripts/pg.sh (BATON_TEST_DATABASE_URL)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

CLIENT_ID = "com.example.app"
_no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def required_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run the Python tests through `make test` (scripts/python-test.sh)")
    return value


def baton_binary() -> str:
    path = required_env("BATON_BINARY")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"BATON_BINARY {path} is not an executable: build baton first")
    return path


def database_url(name: str) -> str:
    """The URL of database `name` on the cluster of BATON_TEST_DATABASE_URL."""
    parts = urllib.parse.urlsplit(required_env("BATON_TEST_DATABASE_URL"))
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def django_database(url: str) -> dict:
    """Django's DATABASES entry for a libpq URL of the form pg.sh prints (socket directory in `host=`)."""
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    return {"NAME": parts.path.lstrip("/"), "USER": parts.username or "postgres",
            "HOST": query.get("host", parts.hostname or ""), "PORT": query.get("port", str(parts.port or ""))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with _no_proxy.open(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def claims(id_token: str) -> dict:
    """The payload of a JWS, unverified (the tests read what the emulator signed)."""
    payload = id_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


# Answers no HTTP server should give, for Peer: a body cut short of its Content-Length, and a status line that is
# not HTTP's.
TRUNCATED_BODY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\nConnection: close\r\n\r\n"
                  b'{"outcome": "current", "sub": "')
GARBAGE_STATUS_LINE = b"garbage\r\n\r\n"


class Peer:
    """A server on a free loopback port that reads each HTTP request whole (head, then the body its Content-Length
    announces) and answers it with the bytes `answer`, then closes the connection: a peer misbehaving where `baton
    serve` should be, as a broken proxy or a half-dead process would. A context manager yielding its URL."""

    def __init__(self, answer: bytes) -> None:
        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                length = 0
                while (line := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                self.rfile.read(length)  # read all of it, so that closing sends FIN, not RST
                self.wfile.write(answer)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class Emulator:
    """`baton emulator` on a free loopback port, with its control routes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([baton_binary(), "emulator", "--port", "0", "--log-level", "error"],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.process.stdout.readline()
        match = re.search(r"emulator listening on (http://\S+)", line)
        if not match:
            self.stop()
            raise RuntimeError(f"baton emulator did not start: {line}")
        self.url = match.group(1).rstrip("/")

    def call(self, path: str, body: dict | None = None, method: str = "POST") -> dict:
        status, answer = http_json(method, self.url + path, body)
        if status >= 300:
            raise RuntimeError(f"emulator {path}: {status} {answer}")
        return answer

    def team(self) -> dict:
        return self.call("/emulator/teams", {})

    def users(self, count: int, private_email: bool = True) -> list[dict]:
        return self.call("/emulator/users", {"client_id": CLIENT_ID, "count": count, "private_email": private_email})["users"]

    def authorize(self, user: str, nonce: str | None = None) -> dict:
        """What Apple's sign-in page gives the browser: `code`, `id_token`, `user_identifier`."""
        return self.call("/emulator/authorize", {"client_id": CLIENT_ID, "user": user, "nonce": nonce})

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


class Transfer:
    """The app `CLIENT_ID` under a sending team on the emulator, moving to a receiving team, and Baton's
    configuration for it against `database_url` with `legacy` (the framework's tables)."""

    def __init__(self, emulator: Emulator, database_url: str, legacy: dict) -> None:
        self.emulator = emulator
        self.database_url = database_url
        self.legacy = legacy
        self.sender = emulator.team()
        self.recipient = emulator.team()
        self.accepted_at: int | None = None
        self.directory = Path(tempfile.mkdtemp(prefix="baton-python-"))
        for name, team in (("sender.p8", self.sender), ("recipient.p8", self.recipient)):
            (self.directory / name).write_text(team["private_key_pem"])
            (self.directory / name).chmod(0o600)
        emulator.call("/emulator/apps", {"client_id": CLIENT_ID, "team_id": self.sender["team_id"]})

    def remove(self) -> None:
        """Deletes the keys and configurations."""
        shutil.rmtree(self.directory)

    def initiate(self) -> None:
        self.emulator.call("/emulator/transfers", {"client_id": CLIENT_ID, "to_team_id": self.recipient["team_id"]})

    def accept(self) -> None:
        self.accepted_at = int(self.emulator.call("/emulator/transfers/accept", {"client_id": CLIENT_ID})["accepted_at_unix"])

    def configuration(self, port: int = 0, **legacy) -> str:
        """Writes Baton's configuration (`legacy` entries added or replaced) and returns its path."""
        transfer = {
            "client_id": CLIENT_ID,
            "sender": {"team_id": self.sender["team_id"], "key_id": self.sender["key_id"], "private_key_path": "sender.p8"},
            "recipient": {"team_id": self.recipient["team_id"], "key_id": self.recipient["key_id"], "private_key_path": "recipient.p8"},
        }
        if self.accepted_at is not None:
            transfer["accepted_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.accepted_at))
        tree = {
            "listen": f"127.0.0.1:{port}",
            "database": {"url": self.database_url, "pool_size": 2},
            "apple": {"base_url": self.emulator.url, "client_ids": [CLIENT_ID], "transfer": transfer},
            "legacy": {**self.legacy, **legacy},
        }
        path = self.directory / f"baton-{port}.json"
        path.write_text(json.dumps(tree))
        return str(path)

    def run(self, *args: str, status: int = 0) -> subprocess.CompletedProcess:
        """Runs `baton ARGS… --config FILE`; fails with its output unless it exits `status`."""
        result = subprocess.run([baton_binary(), *args, "--config", self.configuration()], capture_output=True, text=True, timeout=300)
        if result.returncode != status:
            raise AssertionError(f"baton {' '.join(args)} exited {result.returncode}: {result.stdout}{result.stderr}")
        return result

    @contextlib.contextmanager
    def serving(self, **legacy):
        """Runs `baton serve` on a free port (configuration `legacy` entries added) and yields its URL."""
        port = free_port()
        log = self.directory / f"serve-{port}.log"
        with log.open("w") as output:  # a file, not a pipe: nobody reads the log while it runs
            process = subprocess.Popen([baton_binary(), "serve", "--config", self.configuration(port, **legacy)],
                                       stdout=output, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(400):
                if process.poll() is not None:
                    raise AssertionError(f"baton serve exited {process.returncode}: {log.read_text()}")
                with contextlib.suppress(OSError):
                    if http_json("GET", url + "/healthz")[0] == 200:
                        break
                time.sleep(0.05)
            else:
                raise AssertionError("baton serve did not answer /healthz")
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)
