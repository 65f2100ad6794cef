"""The transfer every framework test runs through its own login code: people sign up before the transfer
(through the framework, with Baton's hook in place: `new`), users of another provider share their
identifiers, `baton transfer-ids` runs for the sending team, the transfer is accepted and the application
switches to the receiving team's credentials, and a few people (the twins) log in once through a path without
Baton, which gives them a second account. Then: signing in after it (`migrated`, then `current`), the bulk
exchange for those who do not, a twin's second account merged at sign-in, `unmatched`, `new`, and an unreachable
or broken Baton."""

from __future__ import annotations

import hashlib
import secrets
import urllib.parse

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, override_settings

import harness


def identity_table(table, provider, **extra):
    """Baton's `legacy` section for a Django framework's identity table `public.<table>` (`id`, `uid`,
    `provider`, `user_id`) whose rows of `provider` are Apple's, the email in `auth_user`."""
    return {
        "table": f"public.{table}", "key_column": "id", "subject_column": "uid", "where": {"provider": provider},
        "email_column": None, "email_policy": "relay",
        "email": {"table": "public.auth_user", "column": "email", "key_column": "id", "reference_column": "user_id"},
        **extra,
    }


def other_rows(table, provider, *user_tables):
    """SQL: a digest of the rows of other providers in `table`, and of their users' rows in `auth_user` and
    `user_tables` (tables with a `user_id` column): everything Baton must leave alone."""
    parts = [f"SELECT s::text AS x FROM {table} s WHERE s.provider <> '{provider}'"]
    for joined, column in (("auth_user", "id"), *((name, "user_id") for name in user_tables)):
        parts.append(f"SELECT t::text FROM {joined} t JOIN {table} s ON s.user_id = t.{column} WHERE s.provider <> '{provider}'")
    return f"SELECT md5(string_agg(x, '|' ORDER BY x)) FROM ({' UNION ALL '.join(parts)}) AS rows"


def aim_at_emulator(cls, names, emulator):
    """Points the URL attributes `names` of a framework's Apple class at the emulator (same paths)."""
    for name in names:
        setattr(cls, name, emulator.url + urllib.parse.urlsplit(getattr(cls, name)).path)


def at_apple(started, emulator, person):
    """What Apple's sign-in page does with the framework's redirect `started`: checks it goes to the emulator's
    authorize URL, lets `person` sign in there, and returns the framework's `state` and Apple's answer."""
    assert started.status_code == 302, started.content
    authorize = urllib.parse.urlsplit(started["Location"])
    assert f"{authorize.scheme}://{authorize.netloc}{authorize.path}" == emulator.url + "/auth/authorize"
    return dict(urllib.parse.parse_qsl(authorize.query))["state"], emulator.authorize(person)


def logged_in_user(client):
    user_id = client.session.get("_auth_user_id")
    return None if user_id is None else int(user_id)


def native_nonce():
    """A native client's nonce: the raw value it sends to the server, and the SHA-256 hex it gives Apple."""
    raw = secrets.token_urlsafe(16)
    return raw, hashlib.sha256(raw.encode()).hexdigest()


class TransferScenario:
    """The shared tests; a subclass per framework supplies its login code and lookups."""

    legacy: dict  # Baton's `legacy` section for the framework's tables
    email_legacy: dict = {}  # `legacy` entries that keep the framework's copies of the email in step
    others_sql: str  # a digest of the rows Baton must leave alone (other providers')

    def point_at(self, emulator):
        """Makes the framework's Apple code talk to the emulator instead of appleid.apple.com."""
        raise NotImplementedError

    def use_team(self, team):
        """The application's Apple credentials: the sending team's before the transfer, the receiving team's after."""
        raise NotImplementedError

    def log_in(self, client, emulator, person):
        """The framework's web login of `person` (the emulator playing Apple's sign-in page): the final response."""
        raise NotImplementedError

    def without_baton(self):
        """Settings (a context manager) under which the framework's login skips Baton's hook, as a login path that
        bypassed Baton during the cutover did."""
        raise NotImplementedError

    def refused_login(self, client, emulator, person):
        """A web login Baton stops: (HTTP status, message to the user)."""
        raise NotImplementedError

    def native_login(self, client, id_token, nonce):
        """A native app's sign-in: it posts Apple's identity token and the raw nonce. Returns the HTTP status
        (200 logged in, or Baton's refusal)."""
        raise NotImplementedError

    def lookup(self, sub):
        """The framework's own lookup of an Apple login carrying `sub`: the user it logs into, or None."""
        raise NotImplementedError

    def add_other_provider(self, i, uid):
        """A user of another provider whose subject is `uid`."""
        raise NotImplementedError

    def identities(self):
        """How many identity rows (every provider) the framework holds."""
        raise NotImplementedError

    def check_email_copies(self, user_id, email):
        """Checks the framework's own copies of the user's email (none by default)."""

    @staticmethod
    def others_digest(sql):
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()[0]

    def new_sub(self, emulator, person):
        return harness.claims(emulator.authorize(person["id"])["id_token"])["sub"]

    @pytest.fixture(scope="class")
    def world(self):
        emulator = harness.Emulator()
        transfer = None
        try:
            self.point_at(emulator)
            transfer = harness.Transfer(emulator, harness.required_env("BATON_TEST_DJANGO_URL"), self.legacy)
            self.use_team(transfer.sender)
            people = emulator.users(8)
            stranger = people.pop()  # signed in with the sending team's app, but has no account here
            people += emulator.users(1, private_email=False)  # shares their real email with Apple
            twins = emulator.users(2)  # get a second account after the transfer
            original = {}
            with transfer.serving() as url, override_settings(BATON_URL=url):
                for person in people + twins:
                    client = Client()
                    assert self.log_in(client, emulator, person["id"]).status_code == 302
                    original[person["id"]] = logged_in_user(client)
            assert None not in original.values() and len(set(original.values())) == len(people + twins)
            for i, person in enumerate(people[:2]):
                self.add_other_provider(i, person["user_identifier"])
            User = get_user_model()
            signed_up = (User.objects.count(), self.identities())
            assert signed_up == (len(people + twins) + 2, len(people + twins) + 2)

            transfer.initiate()
            transfer.run("transfer-ids", "--yes", "--rate", "100")
            transfer.accept()
            self.use_team(transfer.recipient)
            second = {}
            with self.without_baton():
                for twin in twins:
                    client = Client()
                    assert self.log_in(client, emulator, twin["id"]).status_code == 302
                    second[twin["id"]] = logged_in_user(client)
                    assert second[twin["id"]] not in (None, original[twin["id"]])
            yield {"emulator": emulator, "transfer": transfer, "people": people, "original": original,
                   "twins": twins, "second": second, "stranger": stranger, "others": self.others_digest(self.others_sql)}
        finally:
            emulator.stop()
            if transfer is not None:
                transfer.remove()

    def test_signups_before_the_transfer_made_one_account_each(self, world):
        for person in world["people"]:
            assert self.lookup(person["user_identifier"]) == world["original"][person["id"]]
            assert get_user_model().objects.get(pk=world["original"][person["id"]]).email == person["email"]
            self.check_email_copies(world["original"][person["id"]], person["email"])

    def test_the_email_follows_the_new_relay_address(self, world):
        person = world["people"][0]
        user_id = world["original"][person["id"]]
        with world["transfer"].serving(**self.email_legacy) as url, override_settings(BATON_URL=url):
            client = Client()
            assert self.log_in(client, world["emulator"], person["id"]).status_code == 302
        assert logged_in_user(client) == user_id
        new_email = get_user_model().objects.get(pk=user_id).email
        assert new_email != person["email"] and new_email.endswith("@privaterelay.appleid.com")
        self.check_email_copies(user_id, new_email)

    def test_signing_in_after_the_transfer_logs_into_the_original_account(self, world):
        emulator, people, original = world["emulator"], world["people"], world["original"]
        User = get_user_model()
        before = (User.objects.count(), self.identities())
        with world["transfer"].serving() as url, override_settings(BATON_URL=url):
            for person in people[:4]:
                for _ in range(2):  # migrated (current for people[0], migrated by the test before), then current
                    client = Client()
                    response = self.log_in(client, emulator, person["id"])
                    assert response.status_code == 302, response.content
                    assert logged_in_user(client) == original[person["id"]]
        assert (User.objects.count(), self.identities()) == before
        for person in people[:4]:
            new_sub = self.new_sub(emulator, person)
            assert new_sub != person["user_identifier"]
            assert self.lookup(new_sub) == original[person["id"]]
            assert self.lookup(person["user_identifier"]) is None
        assert self.others_digest(self.others_sql) == world["others"]

    def test_users_who_do_not_sign_in_are_exchanged(self, world):
        emulator, people, original = world["emulator"], world["people"], world["original"]
        # The twins' legacy records wait for identifiers their second accounts hold: the exchange records each pair
        # and leaves it (`legacy.on_duplicate` `report`), so it ends with them unresolvable (exit 1).
        exchange = world["transfer"].run("exchange", "--rate", "50", status=1)
        assert f"unresolvable {len(world['twins'])}," in exchange.stdout + exchange.stderr
        assert "a duplicate, for baton merge" in exchange.stdout + exchange.stderr
        for person in people[4:]:
            assert self.lookup(self.new_sub(emulator, person)) == original[person["id"]]
            assert self.lookup(person["user_identifier"]) is None
        User = get_user_model()
        users = User.objects.count()
        with world["transfer"].serving() as url, override_settings(BATON_URL=url):
            for person in people[4:]:
                client = Client()
                assert self.log_in(client, emulator, person["id"]).status_code == 302
                assert logged_in_user(client) == original[person["id"]]
        assert User.objects.count() == users
        assert self.others_digest(self.others_sql) == world["others"]

    def merge_at_sign_in(self, world, twin):
        """`twin` signs in twice through Baton under `legacy.on_duplicate` `merge`: Baton moves the Apple identity
        from their second account onto their original record (`migrated` with `merged_from`), then `current`; both
        logins open the original account. Nothing is created or deleted: the second account stays, without it."""
        emulator = world["emulator"]
        original, second = world["original"][twin["id"]], world["second"][twin["id"]]
        new_sub = self.new_sub(emulator, twin)
        assert self.lookup(new_sub) == second
        User = get_user_model()
        before = (User.objects.count(), self.identities())
        with world["transfer"].serving(on_duplicate="merge") as url, override_settings(BATON_URL=url):
            for _ in range(2):
                client = Client()
                response = self.log_in(client, emulator, twin["id"])
                assert response.status_code == 302, response.content
                assert logged_in_user(client) == original
        assert (User.objects.count(), self.identities()) == before
        assert self.lookup(new_sub) == original
        assert self.lookup(twin["user_identifier"]) is None
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM baton.duplicates WHERE new_sub = %s AND merged_at IS NOT NULL", [new_sub])
            assert cursor.fetchone()[0] == 1

    def test_a_second_account_made_without_baton_is_merged_at_sign_in(self, world):
        self.merge_at_sign_in(world, world["twins"][0])

    def test_unmatched_creates_no_account(self, world):
        User = get_user_model()
        before = (User.objects.count(), self.identities())
        with world["transfer"].serving() as url, override_settings(BATON_URL=url):
            client = Client()
            status, message = self.refused_login(client, world["emulator"], world["stranger"]["id"])
        assert status == 403
        assert "No new account was created" in message and "/account/link-apple/" in message
        assert logged_in_user(client) is None
        assert (User.objects.count(), self.identities()) == before

    def test_new_creates_the_account(self, world):
        emulator = world["emulator"]
        newcomer = emulator.users(1)[0]
        users = get_user_model().objects.count()
        with world["transfer"].serving() as url, override_settings(BATON_URL=url):
            client = Client()
            assert self.log_in(client, emulator, newcomer["id"]).status_code == 302
        assert get_user_model().objects.count() == users + 1
        assert self.lookup(newcomer["user_identifier"]) == logged_in_user(client)

    def test_baton_unreachable_fails_closed(self, world):
        emulator = world["emulator"]
        User = get_user_model()
        users = User.objects.count()
        with override_settings(BATON_URL=f"http://127.0.0.1:{harness.free_port()}"):
            for person in (emulator.users(1)[0], world["stranger"]):
                client = Client()
                status, message = self.refused_login(client, emulator, person["id"])
                assert status == 503 and "try again" in message
                assert logged_in_user(client) is None
        assert User.objects.count() == users

    @pytest.mark.parametrize("answer", [harness.TRUNCATED_BODY, harness.GARBAGE_STATUS_LINE],
                             ids=["truncated_body", "garbage_status_line"])
    def test_a_broken_answer_fails_closed(self, world, answer):
        """An answer HTTP cannot read (http.client's IncompleteRead, BadStatusLine) is Baton unavailable: 503, no
        account, as for an unreachable Baton."""
        emulator = world["emulator"]
        User = get_user_model()
        before = (User.objects.count(), self.identities())
        with harness.Peer(answer) as url, override_settings(BATON_URL=url):
            client = Client()
            status, message = self.refused_login(client, emulator, emulator.users(1)[0]["id"])
        assert status == 503 and "try again" in message
        assert logged_in_user(client) is None
        assert (User.objects.count(), self.identities()) == before

    def test_a_native_sign_in_sends_the_nonce_and_a_replay_is_refused(self, world):
        emulator = world["emulator"]
        newcomer = emulator.users(1)[0]
        raw, hashed = native_nonce()
        id_token = emulator.authorize(newcomer["id"], nonce=hashed)["id_token"]
        User = get_user_model()
        users = User.objects.count()
        with world["transfer"].serving() as url, override_settings(BATON_URL=url):
            assert self.native_login(Client(), id_token, raw + "x") == 403
            assert User.objects.count() == users
            assert self.native_login(Client(), id_token, raw) == 200
            assert self.native_login(Client(), id_token, raw) == 403  # nonce_reused
        assert User.objects.count() == users + 1
        assert self.lookup(newcomer["user_identifier"]) is not None
