"""python-social-auth's own Apple login (social-core's OAuth2 flow through social_django's views and the
pipeline, the code redeemed at the emulator's token endpoint) with `baton_login.social.sign_in` placed before
`social_user`, across a transfer: users created before it log into their original accounts after it."""

import urllib.parse

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, override_settings
from social_core.backends.apple import AppleIdAuth
from social_django.models import UserSocialAuth

import harness
from baton_login.social import BatonLoginRefused

User = get_user_model()

LEGACY = {
    "table": "public.social_auth_usersocialauth", "key_column": "id", "subject_column": "uid",
    "where": {"provider": "apple-id"}, "email_column": None,
    "email": {"table": "public.auth_user", "column": "email", "key_column": "id", "reference_column": "user_id"},
    "email_policy": "relay",
}

OTHERS = """
    SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
        SELECT s::text AS x FROM social_auth_usersocialauth s WHERE s.provider <> 'apple-id'
        UNION ALL SELECT u::text FROM auth_user u JOIN social_auth_usersocialauth s ON s.user_id = u.id WHERE s.provider <> 'apple-id'
    ) AS rows
"""


def use_team(team):
    """The application's Apple credentials: the sending team's before the transfer, the receiving team's after."""
    settings.SOCIAL_AUTH_APPLE_ID_CLIENT = harness.CLIENT_ID
    settings.SOCIAL_AUTH_APPLE_ID_TEAM = team["team_id"]
    settings.SOCIAL_AUTH_APPLE_ID_KEY = team["key_id"]
    settings.SOCIAL_AUTH_APPLE_ID_SECRET = team["private_key_pem"]


def log_in(client, emulator, person):
    """python-social-auth's web login of `person`: returns the final response."""
    started = client.post("/login/apple-id/")
    assert started.status_code == 302, started.content
    authorize = urllib.parse.urlsplit(started["Location"])
    assert f"{authorize.scheme}://{authorize.netloc}" == emulator.url
    state = dict(urllib.parse.parse_qsl(authorize.query))["state"]
    apple = emulator.authorize(person)
    return client.post("/complete/apple-id/", {"code": apple["code"], "state": state})


def logged_in_user(client):
    user_id = client.session.get("_auth_user_id")
    return None if user_id is None else int(user_id)


def social_lookup(sub):
    """python-social-auth's own lookup (`social_user`'s): the user an Apple login carrying `sub` logs into."""
    social = UserSocialAuth.get_social_auth("apple-id", sub)
    return None if social is None else social.user_id


def others_digest():
    with connection.cursor() as cursor:
        cursor.execute(OTHERS)
        return cursor.fetchone()[0]


@pytest.fixture(scope="module")
def world():
    """Before the transfer, with `baton serve` and the pipeline step in place: people sign up through
    python-social-auth (Baton answers `new`), users of another provider share their identifiers; then the
    transfer: `baton transfer-ids` (sending team), the acceptance, the receiving team's credentials."""
    emulator = harness.Emulator()
    for name in ("JWK_URL", "AUTHORIZATION_URL", "ACCESS_TOKEN_URL"):
        setattr(AppleIdAuth, name, emulator.url + urllib.parse.urlsplit(getattr(AppleIdAuth, name)).path)
    try:
        transfer = harness.Transfer(emulator, harness.required_env("BATON_TEST_DJANGO_URL"), LEGACY)
        use_team(transfer.sender)
        people = emulator.users(7)
        stranger = people.pop()
        original = {}
        with transfer.serving() as url, override_settings(BATON_URL=url):
            for person in people:
                client = Client()
                assert log_in(client, emulator, person["id"]).status_code == 302
                original[person["id"]] = logged_in_user(client)
        assert None not in original.values() and len(set(original.values())) == len(people)
        for i, person in enumerate(people[:2]):
            other = User.objects.create(username=f"google{i}", email=f"g{i}@example.org")
            UserSocialAuth.objects.create(user=other, provider="google-oauth2", uid=person["user_identifier"], extra_data={"auth_time": 1})

        transfer.initiate()
        transfer.run("transfer-ids", "--yes", "--rate", "100")
        transfer.accept()
        use_team(transfer.recipient)
        yield {"emulator": emulator, "transfer": transfer, "people": people, "original": original,
               "stranger": stranger, "others": others_digest()}
    finally:
        emulator.stop()


def test_signups_before_the_transfer_made_one_account_each(world):
    people = world["people"]
    assert UserSocialAuth.objects.filter(provider="apple-id").count() == len(people)
    for person in people:
        assert social_lookup(person["user_identifier"]) == world["original"][person["id"]]
        assert User.objects.get(pk=world["original"][person["id"]]).email == person["email"]


def test_signing_in_after_the_transfer_logs_into_the_original_account(world):
    emulator, people, original = world["emulator"], world["people"], world["original"]
    users, accounts = User.objects.count(), UserSocialAuth.objects.count()
    with world["transfer"].serving() as url, override_settings(BATON_URL=url):
        for person in people[:4]:
            for _ in range(2):  # migrated, then current
                client = Client()
                response = log_in(client, emulator, person["id"])
                assert response.status_code == 302, response.content
                assert logged_in_user(client) == original[person["id"]]
    assert (User.objects.count(), UserSocialAuth.objects.count()) == (users, accounts)
    for person in people[:4]:
        new_sub = harness.claims(emulator.authorize(person["id"])["id_token"])["sub"]
        assert new_sub != person["user_identifier"]
        assert social_lookup(new_sub) == original[person["id"]]
        assert social_lookup(person["user_identifier"]) is None
        assert User.objects.get(pk=original[person["id"]]).email != person["email"]  # the new team's relay address
    assert others_digest() == world["others"]


def test_users_who_do_not_sign_in_are_exchanged(world):
    emulator, people, original = world["emulator"], world["people"], world["original"]
    world["transfer"].run("exchange", "--rate", "50")
    for person in people[4:]:
        new_sub = harness.claims(emulator.authorize(person["id"])["id_token"])["sub"]
        assert social_lookup(new_sub) == original[person["id"]]
    users = User.objects.count()
    with world["transfer"].serving() as url, override_settings(BATON_URL=url):
        for person in people[4:]:
            client = Client()
            assert log_in(client, emulator, person["id"]).status_code == 302
            assert logged_in_user(client) == original[person["id"]]
    assert User.objects.count() == users
    assert others_digest() == world["others"]


def test_unmatched_creates_no_account(world):
    users, accounts = User.objects.count(), UserSocialAuth.objects.count()
    with world["transfer"].serving() as url, override_settings(BATON_URL=url):
        client = Client()
        with pytest.raises(BatonLoginRefused) as refused:
            log_in(client, world["emulator"], world["stranger"]["id"])
    assert refused.value.status == 403
    assert "No new account was created" in str(refused.value) and "/account/link-apple/" in str(refused.value)
    assert logged_in_user(client) is None
    assert (User.objects.count(), UserSocialAuth.objects.count()) == (users, accounts)


def test_new_creates_the_account(world):
    emulator = world["emulator"]
    newcomer = emulator.users(1)[0]
    users = User.objects.count()
    with world["transfer"].serving() as url, override_settings(BATON_URL=url):
        client = Client()
        assert log_in(client, emulator, newcomer["id"]).status_code == 302
    assert User.objects.count() == users + 1
    assert social_lookup(newcomer["user_identifier"]) == logged_in_user(client)


def test_baton_unreachable_fails_closed(world):
    emulator = world["emulator"]
    newcomer = emulator.users(1)[0]
    users = User.objects.count()
    with override_settings(BATON_URL=f"http://127.0.0.1:{harness.free_port()}"):
        client = Client()
        with pytest.raises(BatonLoginRefused) as refused:
            log_in(client, emulator, newcomer["id"])
    assert refused.value.status == 503
    assert logged_in_user(client) is None
    assert User.objects.count() == users
