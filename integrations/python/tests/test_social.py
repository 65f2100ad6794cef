"""python-social-auth's own Apple login with BatonAppleIdAuth and the `sign_in` pipeline step before
`social_user`: the web flow (social_django's views, the code redeemed at the emulator's token endpoint) and a
native client's identity token through `backend.do_auth`."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings
from social_core.backends.apple import AppleIdAuth
from social_django.models import UserSocialAuth

import harness
from baton_login.social import BatonLoginRefused
from scenario import TransferScenario, at_apple, identity_table, aim_at_emulator, other_rows


class TestSocial(TransferScenario):
    legacy = identity_table("social_auth_usersocialauth", "apple-id")
    others_sql = other_rows("social_auth_usersocialauth", "apple-id")

    def point_at(self, emulator):
        aim_at_emulator(AppleIdAuth, ("JWK_URL", "AUTHORIZATION_URL", "ACCESS_TOKEN_URL"), emulator)

    def use_team(self, team):
        settings.SOCIAL_AUTH_APPLE_ID_CLIENT = harness.CLIENT_ID
        settings.SOCIAL_AUTH_APPLE_ID_TEAM = team["team_id"]
        settings.SOCIAL_AUTH_APPLE_ID_KEY = team["key_id"]
        settings.SOCIAL_AUTH_APPLE_ID_SECRET = team["private_key_pem"]

    def log_in(self, client, emulator, person):
        state, apple = at_apple(client.post("/login/apple-id/"), emulator, person)
        return client.post("/complete/apple-id/", {"code": apple["code"], "state": state})

    def without_baton(self):
        return override_settings(SOCIAL_AUTH_PIPELINE=tuple(step for step in settings.SOCIAL_AUTH_PIPELINE if step != "baton_login.social.sign_in"))

    def refused_login(self, client, emulator, person):
        with pytest.raises(BatonLoginRefused) as refused:
            self.log_in(client, emulator, person)
        return refused.value.status, str(refused.value)

    def lookup(self, sub):
        social = UserSocialAuth.get_social_auth("apple-id", sub)
        return None if social is None else social.user_id

    def add_other_provider(self, i, uid):
        other = get_user_model().objects.create(username=f"google{i}", email=f"g{i}@example.org")
        UserSocialAuth.objects.create(user=other, provider="google-oauth2", uid=uid, extra_data={"auth_time": 1})

    def identities(self):
        return UserSocialAuth.objects.count()

    def native_login(self, client, id_token, nonce):
        try:
            return client.post("/native/apple-id/", {"id_token": id_token, "nonce": nonce}).status_code
        except BatonLoginRefused as refused:
            return refused.status
