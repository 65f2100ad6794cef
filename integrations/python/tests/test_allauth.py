"""django-allauth's own Apple login (web flow: redirect, Apple's form post, the code redeemed at the emulator's
token endpoint) with BatonSocialAccountAdapter, across a transfer: users created before it log into their
original accounts after it, through `baton serve` (signing in) or `baton exchange` (not signing in)."""

import urllib.parse

import pytest
from allauth.account.models import EmailAddress
from allauth.core import context
from allauth.socialaccount.models import SocialAccount, SocialApp, SocialLogin
from allauth.socialaccount.providers.apple.views import AppleOAuth2Adapter
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, RequestFactory, override_settings

import harness

User = get_user_model()

LEGACY = {
    "table": "public.socialaccount_socialaccount", "key_column": "id", "subject_column": "uid",
    "where": {"provider": "apple"}, "email_column": None,
    "email": {"table": "public.auth_user", "column": "email", "key_column": "id", "reference_column": "user_id"},
    "json": {"column": "extra_data", "subject_keys": ["sub"], "email_keys": ["email"]},
    "email_policy": "relay",
}
EMAIL_COPIES = [{"table": "public.account_emailaddress", "column": "email", "user_column": "user_id"}]

# Everything Baton must leave alone: other providers' accounts, their users and email rows.
OTHERS = """
    SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
        SELECT s::text AS x FROM socialaccount_socialaccount s WHERE s.provider <> 'apple'
        UNION ALL SELECT u::text FROM auth_user u JOIN socialaccount_socialaccount s ON s.user_id = u.id WHERE s.provider <> 'apple'
        UNION ALL SELECT e::text FROM account_emailaddress e JOIN socialaccount_socialaccount s ON s.user_id = e.user_id WHERE s.provider <> 'apple'
    ) AS rows
"""


def use_team(emulator, team):
    """The application's Apple credentials: the sending team's before the transfer, the receiving team's after."""
    SocialApp.objects.update_or_create(provider="apple", defaults={
        "name": "Apple", "client_id": harness.CLIENT_ID, "key": team["team_id"], "secret": team["key_id"],
        "settings": {"certificate_key": team["private_key_pem"]},
    })


def log_in(client, emulator, person):
    """allauth's web login of `person`: returns the final response."""
    started = client.get("/accounts/apple/login/?process=login")
    assert started.status_code == 302, started.content
    authorize = urllib.parse.urlsplit(started["Location"])
    assert f"{authorize.scheme}://{authorize.netloc}" == emulator.url
    state = dict(urllib.parse.parse_qsl(authorize.query))["state"]
    apple = emulator.authorize(person)
    posted = client.post("/accounts/apple/login/callback/", {"code": apple["code"], "state": state, "id_token": apple["id_token"]})
    assert posted.status_code == 302, posted.content
    return client.get(posted["Location"])


def logged_in_user(client):
    user_id = client.session.get("_auth_user_id")
    return None if user_id is None else int(user_id)


def allauth_lookup(sub):
    """allauth's own lookup of an Apple login carrying `sub`: the user it logs into, or None."""
    login = SocialLogin(user=User(), account=SocialAccount(provider="apple", uid=sub))
    with context.request_context(RequestFactory().get("/")):
        login.lookup()
    return login.user.pk if login.is_existing else None


def others_digest():
    with connection.cursor() as cursor:
        cursor.execute(OTHERS)
        return cursor.fetchone()[0]


@pytest.fixture(scope="module")
def world():
    """Before the transfer, with `baton serve` and the adapter in place: people sign up through allauth (Baton
    answers `new`), users of another provider share their identifiers; then the transfer: `baton transfer-ids`
    (sending team), the acceptance, and the application switched to the receiving team's credentials."""
    emulator = harness.Emulator()
    for name in ("access_token_url", "authorize_url", "public_key_url"):
        setattr(AppleOAuth2Adapter, name, emulator.url + urllib.parse.urlsplit(getattr(AppleOAuth2Adapter, name)).path)
    try:
        transfer = harness.Transfer(emulator, harness.required_env("BATON_TEST_DJANGO_URL"), LEGACY)
        use_team(emulator, transfer.sender)
        people = emulator.users(7)
        stranger = people.pop()  # signed in with the sending team's app, but has no account here
        original = {}
        with transfer.serving() as url, override_settings(BATON_URL=url):
            for person in people:
                client = Client()
                assert log_in(client, emulator, person["id"]).status_code == 302
                original[person["id"]] = logged_in_user(client)
        assert None not in original.values() and len(set(original.values())) == len(people)
        for i, person in enumerate(people[:2]):
            other = User.objects.create(username=f"google{i}", email=f"g{i}@example.org")
            SocialAccount.objects.create(user=other, provider="google", uid=person["user_identifier"], extra_data={"sub": person["user_identifier"]})
            EmailAddress.objects.create(user=other, email=f"g{i}@example.org", primary=True, verified=True)

        transfer.initiate()
        transfer.run("transfer-ids", "--yes", "--rate", "100")
        transfer.accept()
        use_team(emulator, transfer.recipient)
        yield {"emulator": emulator, "transfer": transfer, "people": people, "original": original,
               "stranger": stranger, "others": others_digest()}
    finally:
        emulator.stop()


def test_signups_before_the_transfer_made_one_account_each(world):
    people = world["people"]
    assert User.objects.filter(socialaccount__provider="apple").count() == len(people)
    for person in people:
        account = SocialAccount.objects.get(provider="apple", uid=person["user_identifier"])
        assert account.user_id == world["original"][person["id"]]
        assert EmailAddress.objects.get(user_id=account.user_id).email == person["email"]


def test_email_address_row_follows_the_new_relay_address(world):
    """legacy.email_copies: allauth's account_emailaddress row holding the old relay address holds the new one."""
    person = world["people"][0]
    user_id = world["original"][person["id"]]
    with world["transfer"].serving(email_copies=EMAIL_COPIES) as url, override_settings(BATON_URL=url):
        client = Client()
        log_in(client, world["emulator"], person["id"])
    assert logged_in_user(client) == user_id
    new_email = User.objects.get(pk=user_id).email
    assert new_email != person["email"]
    assert list(EmailAddress.objects.filter(user_id=user_id).values_list("email", flat=True)) == [new_email]


def test_signing_in_after_the_transfer_logs_into_the_original_account(world):
    emulator, people, original = world["emulator"], world["people"], world["original"]
    users, accounts = User.objects.count(), SocialAccount.objects.count()
    with world["transfer"].serving() as url, override_settings(BATON_URL=url):
        for person in people[:4]:
            for _ in range(2):  # migrated, then current
                client = Client()
                response = log_in(client, emulator, person["id"])
                assert response.status_code == 302, response.content
                assert logged_in_user(client) == original[person["id"]]
    assert (User.objects.count(), SocialAccount.objects.count()) == (users, accounts)
    for person in people[:4]:
        new_sub = harness.claims(emulator.authorize(person["id"])["id_token"])["sub"]
        assert new_sub != person["user_identifier"]
        account = SocialAccount.objects.get(provider="apple", uid=new_sub)
        assert account.user_id == original[person["id"]]
        assert account.extra_data["sub"] == new_sub
        assert allauth_lookup(new_sub) == original[person["id"]]
    assert others_digest() == world["others"]


def test_users_who_do_not_sign_in_are_exchanged(world):
    emulator, people, original = world["emulator"], world["people"], world["original"]
    world["transfer"].run("exchange", "--rate", "50")
    for person in people[4:]:
        new_sub = harness.claims(emulator.authorize(person["id"])["id_token"])["sub"]
        assert allauth_lookup(new_sub) == original[person["id"]]
        assert allauth_lookup(person["user_identifier"]) is None
    users = User.objects.count()
    with world["transfer"].serving() as url, override_settings(BATON_URL=url):
        for person in people[4:]:
            client = Client()
            assert log_in(client, emulator, person["id"]).status_code == 302
            assert logged_in_user(client) == original[person["id"]]
    assert User.objects.count() == users
    assert others_digest() == world["others"]


def test_unmatched_creates_no_account(world):
    emulator, stranger = world["emulator"], world["stranger"]
    users, accounts = User.objects.count(), SocialAccount.objects.count()
    with world["transfer"].serving() as url, override_settings(BATON_URL=url):
        client = Client()
        response = log_in(client, emulator, stranger["id"])
    assert response.status_code == 403
    assert "No new account was created" in response.content.decode()
    assert "/account/link-apple/" in response.content.decode()
    assert logged_in_user(client) is None
    assert (User.objects.count(), SocialAccount.objects.count()) == (users, accounts)


def test_new_creates_the_account(world):
    emulator = world["emulator"]
    newcomer = emulator.users(1)[0]
    users = User.objects.count()
    with world["transfer"].serving() as url, override_settings(BATON_URL=url):
        client = Client()
        assert log_in(client, emulator, newcomer["id"]).status_code == 302
    assert User.objects.count() == users + 1
    assert SocialAccount.objects.get(provider="apple", uid=newcomer["user_identifier"]).user_id == logged_in_user(client)


def test_baton_unreachable_fails_closed(world):
    emulator = world["emulator"]
    newcomer = emulator.users(1)[0]
    users = User.objects.count()
    with override_settings(BATON_URL=f"http://127.0.0.1:{harness.free_port()}"):
        client = Client()
        response = log_in(client, emulator, newcomer["id"])
    assert response.status_code == 503
    assert logged_in_user(client) is None
    assert User.objects.count() == users
