"""What a login does with Baton's answer, shared by the allauth and python-social-auth glue.

Django settings: `BATON_URL` (default `http://127.0.0.1:8080`), `BATON_TIMEOUT` in seconds (default 5),
`BATON_LINK_URL` (optional: the application's page that re-links an account through `POST /v1/link`).
"""

from __future__ import annotations

from django.conf import settings

from .client import UNMATCHED, BatonClient, BatonRefused, BatonUnavailable, SignIn

UNAVAILABLE = "Sign in with Apple is briefly unavailable while accounts move to the app's new developer team. Please try again in a few minutes."
UNVERIFIED = "Apple's sign-in could not be verified. Please sign in again."
UNMATCHED_MESSAGE = (
    "This Apple ID already has an account from before the app moved to its new developer team, and it could not be "
    "carried over automatically. No new account was created."
)


class LoginRefused(Exception):
    """The login must stop: `status` is the HTTP status to answer with, `message` what to tell the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def client() -> BatonClient:
    """The client of the `baton serve` the settings name."""
    return BatonClient(getattr(settings, "BATON_URL", "http://127.0.0.1:8080"), getattr(settings, "BATON_TIMEOUT", 5.0))


def correlate(id_token: str, uid: str, nonce: str | None = None, nonce_flow: str | None = None) -> SignIn:
    """Sends the identity token to Baton before the framework looks the account up, and returns the answer when
    the login may go on: `current` or `migrated` (the record now carries `uid`, so the framework's own lookup
    finds it) or `new` (the framework may create the account).

    Raises LoginRefused, and so never lets the framework create an account, when Baton is unreachable (fail
    closed), refuses the token, answers for another `sub` than the framework's, or answers `unmatched` (the
    person has an account under the sending team).
    """
    try:
        answer = client().sign_in(id_token, nonce=nonce, nonce_flow=nonce_flow)
    except BatonUnavailable as error:
        raise LoginRefused(503, UNAVAILABLE) from error
    except BatonRefused as error:
        raise LoginRefused(403, UNVERIFIED) from error
    if answer.sub != uid:
        raise LoginRefused(403, UNVERIFIED)
    if answer.outcome == UNMATCHED:
        link = getattr(settings, "BATON_LINK_URL", None)
        raise LoginRefused(403, UNMATCHED_MESSAGE + (f" Link it to your account here: {link}" if link else " Please contact support."))
    return answer
