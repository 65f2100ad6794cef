"""allauth's SocialAccountAdapter with Baton's sign-in before an Apple login completes."""

from __future__ import annotations

from allauth.account.adapter import get_adapter as get_account_adapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialAccount, SocialToken
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse

from ..client import CURRENT, MIGRATED, SignIn
from ..login import UNVERIFIED, LoginRefused, correlate
from .provider import ATTRIBUTE


class BatonSocialAccountAdapter(DefaultSocialAccountAdapter):
    """Sends every Apple login's identity token to Baton in `pre_social_login`.

    allauth has already looked the account up by the token's `sub` (`SocialLogin.lookup()`) and found nothing
    for a user whose record still carries the sending team's identifier; Baton rewrites that record, and the
    lookup runs again and finds it, so the user logs into their original account. Under `legacy.on_duplicate`
    `merge` the lookup may have found a second account the user got without Baton instead: Baton moves the
    identifier onto the original record (`migrated`, `merged_from`) and the lookup runs again. `new` lets allauth
    create the account; `unmatched`, a refused token and an unreachable Baton stop the login (`baton_refused`).
    """

    def pre_social_login(self, request, sociallogin):
        super().pre_social_login(request, sociallogin)
        if sociallogin.account.provider != "apple":
            return
        token = getattr(sociallogin, ATTRIBUTE, None)
        if token is None:
            raise ImproperlyConfigured(
                'Apple logins need SOCIALACCOUNT_PROVIDERS["apple"]["provider_class"] = "baton_login.allauth.provider.BatonAppleProvider"'
            )
        try:
            answer = correlate(token.id_token, sociallogin.account.uid, nonce=token.nonce)
            if answer.outcome in (CURRENT, MIGRATED):
                self._log_into_record(request, sociallogin, answer)
        except LoginRefused as refused:
            raise ImmediateHttpResponse(self.baton_refused(request, sociallogin, refused)) from refused

    def _log_into_record(self, request, sociallogin, answer: SignIn) -> None:
        """Makes the login's account the record Baton answered with, looking it up again after a migration: when
        allauth found none (the record still held the sending team's identifier), and when it found the second
        account Baton has just merged (`merged_from`), whose row no longer holds the identifier."""
        account = sociallogin.account
        merged = answer.merged_from is not None and account.pk is not None and str(account.pk) == answer.merged_from
        if account.pk is None or merged:
            if sociallogin.is_existing:  # an email match allauth made, or the merged account's user
                sociallogin.user = get_account_adapter(request).new_user(request)
            if merged:
                # The row allauth loaded is stale (its uid was released): look up by uid with an unsaved account,
                # and store the token afresh (allauth's first lookup stored it for the merged account).
                sociallogin.account = SocialAccount(provider=account.provider, uid=account.uid, extra_data=account.extra_data)
                token = sociallogin.token
                if token is not None and token.pk is not None:
                    sociallogin.token = SocialToken(app=token.app, token=token.token, token_secret=token.token_secret,
                                                    expires_at=token.expires_at)
            sociallogin.lookup()
        if str(sociallogin.account.pk) != answer.user.key:
            raise LoginRefused(403, UNVERIFIED)

    def baton_refused(self, request, sociallogin, refused: LoginRefused) -> HttpResponse:
        """The response of a login Baton stopped (override it to render a template): `refused.message` as text."""
        return HttpResponse(refused.message, status=refused.status, content_type="text/plain; charset=utf-8")
