"""python-social-auth glue: `BatonAppleIdAuth` keeps the raw identity token social-core verified, and the
`sign_in` pipeline step sends it to Baton before `social_core.pipeline.social_auth.social_user` looks the
account up.

    AUTHENTICATION_BACKENDS = ["baton_login.social.BatonAppleIdAuth", …]
    SOCIAL_AUTH_PIPELINE = (…, "social_core.pipeline.social_auth.auth_allowed",
                            "baton_login.social.sign_in",
                            "social_core.pipeline.social_auth.social_user", …)
"""

from __future__ import annotations

from social_core.backends.apple import AppleIdAuth
from social_core.exceptions import AuthException

from .client import CURRENT, MIGRATED
from .login import UNVERIFIED, LoginRefused, correlate


class BatonLoginRefused(AuthException):
    """Baton stopped the login; `status` and `message` as `baton_login.login.LoginRefused`. The message is
    what the user should read (SocialAuthExceptionMiddleware shows it)."""

    def __init__(self, backend, refused: LoginRefused) -> None:
        super().__init__(backend, refused.message)
        self.status = refused.status
        self.message = refused.message

    def __str__(self) -> str:
        return self.message


class BatonAppleIdAuth(AppleIdAuth):
    """social-core's Apple backend (same name, `apple-id`, so the same `social_auth_usersocialauth` rows) that
    keeps the identity token it verified, from Apple's token endpoint or from a native client's `do_auth`."""

    def decode_id_token(self, id_token):
        claims = super().decode_id_token(id_token)
        self.baton_identity_token = id_token
        return claims


def sign_in(backend, uid, *args, **kwargs):
    """Pipeline step: sends the Apple login's identity token to Baton (with `nonce` when the request carries the
    raw nonce a native client hashed into Apple's request) before `social_user` looks the account up by `uid`.

    `current` and `migrated`: the record carries `uid` now, so `social_user` finds the original account;
    `new`: the pipeline goes on and creates the account. `unmatched`, a refused token or an unreachable Baton
    raise BatonLoginRefused, so no account is created.
    """
    if backend.name != BatonAppleIdAuth.name:
        return None
    token = getattr(backend, "baton_identity_token", None)
    if token is None:
        raise BatonLoginRefused(backend, LoginRefused(500, 'Apple logins need the backend "baton_login.social.BatonAppleIdAuth"'))
    nonce = backend.data.get("nonce") or None
    try:
        answer = correlate(token, uid, nonce=nonce)
        if answer.outcome in (CURRENT, MIGRATED):
            social = backend.strategy.storage.user.get_social_auth(backend.name, uid)
            if social is None or str(social.pk) != answer.user.key:
                raise LoginRefused(403, UNVERIFIED)
    except LoginRefused as refused:
        raise BatonLoginRefused(backend, refused) from refused
    return {"baton_outcome": answer.outcome}
