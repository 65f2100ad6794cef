"""allauth's Apple provider, keeping the identity token (and a native client's nonce) on the SocialLogin."""

from __future__ import annotations

from dataclasses import dataclass

from allauth.socialaccount.providers.apple.provider import AppleProvider
from allauth.socialaccount.providers.apple.views import AppleOAuth2Adapter


@dataclass(frozen=True)
class IdentityToken:
    """The raw identity token behind a SocialLogin, and the nonce a native client sent with it."""

    id_token: str
    nonce: str | None = None


ATTRIBUTE = "baton_identity_token"


class BatonAppleOAuth2Adapter(AppleOAuth2Adapter):
    """The web flow: the identity token Apple's token endpoint returned for the authorization code."""

    def complete_login(self, request, app, token, **kwargs):
        login = super().complete_login(request, app, token, **kwargs)
        setattr(login, ATTRIBUTE, IdentityToken(kwargs["response"]["id_token"]))
        return login


class BatonAppleProvider(AppleProvider):
    """allauth's Apple provider (same id, so the same `socialaccount_socialaccount` rows) whose logins carry
    the raw identity token. Its views and URLs are this package's (`baton_login.allauth.urls`)."""

    oauth2_adapter_class = BatonAppleOAuth2Adapter

    def verify_token(self, request, token):
        """The native flow (allauth headless, `POST …/auth/provider/token`): the app sends `id_token`, and the
        raw nonce it hashed into Apple's request as `nonce` in the same `token` object."""
        login = super().verify_token(request, token)
        nonce = token.get("nonce")
        setattr(login, ATTRIBUTE, IdentityToken(token["id_token"], nonce if isinstance(nonce, str) else None))
        return login
