"""django-allauth's own Apple login with BatonSocialAccountAdapter and BatonAppleProvider: the web flow
(allauth's redirect, Apple's form post, the code redeemed at the emulator's token endpoint) and the native
flow (allauth headless, an identity token and its nonce from the app)."""

import json

from allauth.account.models import EmailAddress
from allauth.core import context
from allauth.socialaccount.models import SocialAccount, SocialApp, SocialLogin, SocialToken
from allauth.socialaccount.providers.apple.views import AppleOAuth2Adapter
from django.contrib.auth import get_user_model
from django.test import Client, RequestFactory, override_settings

import harness
from scenario import TransferScenario, logged_in_user, at_apple, identity_table, aim_at_emulator, other_rows


class TestAllauth(TransferScenario):
    legacy = identity_table("socialaccount_socialaccount", "apple",
                            json={"column": "extra_data", "subject_keys": ["sub"], "email_keys": ["email"]})
    email_legacy = {"email_copies": [{"table": "public.account_emailaddress", "column": "email", "user_column": "user_id"}]}
    others_sql = other_rows("socialaccount_socialaccount", "apple", "account_emailaddress")

    def point_at(self, emulator):
        aim_at_emulator(AppleOAuth2Adapter, ("access_token_url", "authorize_url", "public_key_url"), emulator)

    def use_team(self, team):
        SocialApp.objects.update_or_create(provider="apple", defaults={
            "name": "Apple", "client_id": harness.CLIENT_ID, "key": team["team_id"], "secret": team["key_id"],
            "settings": {"certificate_key": team["private_key_pem"]},
        })

    def log_in(self, client, emulator, person):
        state, apple = at_apple(client.get("/accounts/apple/login/?process=login"), emulator, person)
        posted = client.post("/accounts/apple/login/callback/", {"code": apple["code"], "state": state, "id_token": apple["id_token"]})
        assert posted.status_code == 302, posted.content
        return client.get(posted["Location"])

    def without_baton(self):
        return override_settings(SOCIALACCOUNT_ADAPTER="allauth.socialaccount.adapter.DefaultSocialAccountAdapter")

    def refused_login(self, client, emulator, person):
        response = self.log_in(client, emulator, person)
        return response.status_code, response.content.decode()

    def lookup(self, sub):
        login = SocialLogin(user=get_user_model()(), account=SocialAccount(provider="apple", uid=sub))
        with context.request_context(RequestFactory().get("/")):
            login.lookup()
        return login.user.pk if login.is_existing else None

    def add_other_provider(self, i, uid):
        other = get_user_model().objects.create(username=f"google{i}", email=f"g{i}@example.org")
        SocialAccount.objects.create(user=other, provider="google", uid=uid, extra_data={"sub": uid})
        EmailAddress.objects.create(user=other, email=f"g{i}@example.org", primary=True, verified=True)

    def identities(self):
        return SocialAccount.objects.count()

    def check_email_copies(self, user_id, email):
        assert list(EmailAddress.objects.filter(user_id=user_id).values_list("email", flat=True)) == [email]

    def native_login(self, client, id_token, nonce):
        body = {"provider": "apple", "process": "login", "token": {"client_id": harness.CLIENT_ID, "id_token": id_token, "nonce": nonce}}
        return client.post("/_allauth/app/v1/auth/provider/token", json.dumps(body), content_type="application/json").status_code

    def test_an_email_match_still_logs_into_the_original_account(self, world):
        """With SOCIALACCOUNT_EMAIL_AUTHENTICATION, allauth's lookup has matched the user by their real email before
        the adapter runs; the account Baton migrated is the one logged into, and no second one is connected."""
        emulator, person = world["emulator"], world["people"][-1]
        assert not person["is_private_email"]
        identities = self.identities()
        with world["transfer"].serving() as url, override_settings(BATON_URL=url, SOCIALACCOUNT_EMAIL_AUTHENTICATION=True):
            client = Client()
            assert self.log_in(client, emulator, person["id"]).status_code == 302
        assert logged_in_user(client) == world["original"][person["id"]]
        assert self.lookup(self.new_sub(emulator, person)) == world["original"][person["id"]]
        assert self.identities() == identities

    def test_a_merge_at_sign_in_with_stored_tokens(self, world):
        """With SOCIALACCOUNT_STORE_TOKENS, allauth's first lookup stored Apple's token for the second account; the
        login Baton merges still opens the original account, which gets the token."""
        with override_settings(SOCIALACCOUNT_STORE_TOKENS=True):
            self.merge_at_sign_in(world, world["twins"][1])
        assert SocialToken.objects.filter(account__user_id=world["original"][world["twins"][1]["id"]]).exists()
