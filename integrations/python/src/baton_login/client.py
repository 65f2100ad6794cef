"""A small client of `baton serve`'s `POST /v1/signin` (docs/openapi.yaml), on the standard library only."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass

CURRENT = "current"
MIGRATED = "migrated"
NEW = "new"
UNMATCHED = "unmatched"
OUTCOMES = (CURRENT, MIGRATED, NEW, UNMATCHED)


@dataclass(frozen=True)
class BatonUser:
    """The application's record Baton correlated the token with: its key column as text, subject, email."""

    key: str
    sub: str
    email: str | None


@dataclass(frozen=True)
class SignIn:
    """Baton's answer: the outcome, the token's `sub`, the record (None for `new` and `unmatched`), the token's
    `transfer_sub` during the 60 days after a transfer, and `merged_from`: on a `migrated` that merged a second
    account (`legacy.on_duplicate` `merge`), the key of the record that held `sub` until this sign-in."""

    outcome: str
    sub: str
    user: BatonUser | None
    transfer_sub: str | None
    merged_from: str | None = None


class BatonUnavailable(Exception):
    """Baton gave no usable answer (unreachable, timed out, a 5xx, an answer HTTP cannot read, such as a body cut
    short or a garbage status line, or a body that is not its answer)."""


class BatonRefused(Exception):
    """Baton refused the sign-in with a 4xx: `error` is its stable code (`invalid_token`, `nonce_reused`, …)."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason


class BatonClient:
    """Sends identity tokens to `baton serve` at `base_url` (e.g. `http://127.0.0.1:8080`).

    Requests never go through a proxy from the environment: Baton is a sidecar on the application's network.
    """

    def __init__(self, base_url: str, timeout: float = 5.0) -> None:
        self.url = base_url.rstrip("/") + "/v1/signin"
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def sign_in(self, id_token: str, nonce: str | None = None, nonce_flow: str | None = None) -> SignIn:
        """Verifies `id_token` and correlates it with the application's record (migrating it when its
        `transfer_sub` leads to one). `nonce` is the raw nonce the client made; `nonce_flow` is `native`
        (Apple saw its SHA-256, the default) or `web` (Apple saw the nonce itself).

        Raises BatonRefused for a 4xx (also when its body cannot be read), BatonUnavailable when there is no
        usable answer; nothing else from the HTTP layer or the JSON decoder.
        """
        body: dict[str, str] = {"id_token": id_token}
        if nonce is not None:
            body["nonce"] = nonce
            if nonce_flow is not None:
                body["nonce_flow"] = nonce_flow
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            if 400 <= error.code < 500:
                problem = _json_object(_body(error)) or {}
                raise BatonRefused(error.code, str(problem.get("error", "refused")), str(problem.get("reason", ""))) from None
            raise BatonUnavailable(f"baton answered {error.code}") from None
        except _HTTP_ERRORS as error:
            raise BatonUnavailable(f"baton unreachable or its answer unreadable: {error!r}") from None
        return _answer(raw)


# What urllib and http.client raise when the peer is unreachable or its answer cannot be read: OSError (URLError,
# timeouts, refused and reset connections), http.client.HTTPException (IncompleteRead for a body cut short,
# BadStatusLine, LineTooLong, too many headers; not OSErrors), and ValueError, which urllib raises for some of
# what it cannot parse.
_HTTP_ERRORS = (OSError, http.client.HTTPException, ValueError)


def _body(error: urllib.error.HTTPError) -> bytes:
    """The body of a 4xx, or nothing when it cannot be read: the status alone is the refusal."""
    try:
        return error.read()
    except _HTTP_ERRORS:
        return b""


def _json_object(raw: bytes) -> dict | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8); nested deeper than the decoder recurses
        return None
    return value if isinstance(value, dict) else None


def _answer(raw: bytes) -> SignIn:
    answer = _json_object(raw)
    if answer is None or answer.get("outcome") not in OUTCOMES or not isinstance(answer.get("sub"), str):
        raise BatonUnavailable("baton's answer is not a sign-in answer")
    user = answer.get("user")
    record = None
    if isinstance(user, dict) and isinstance(user.get("key"), str) and isinstance(user.get("sub"), str):
        record = BatonUser(key=user["key"], sub=user["sub"], email=user.get("email"))
    if (record is None) != (answer["outcome"] in (NEW, UNMATCHED)):
        raise BatonUnavailable("baton's answer does not match its outcome")
    merged_from = answer.get("merged_from")
    if merged_from is not None and (not isinstance(merged_from, str) or answer["outcome"] != MIGRATED):
        raise BatonUnavailable("baton's answer does not match its outcome")
    return SignIn(outcome=answer["outcome"], sub=answer["sub"], user=record, transfer_sub=answer.get("transfer_sub"),
                  merged_from=merged_from)
