"""Sign in with Apple logins through Baton (`baton serve`) in Django: a stdlib client of `POST /v1/signin`,
an allauth provider and adapter (`baton_login.allauth`), and a python-social-auth backend and pipeline step
(`baton_login.social`). docs/integrations.md explains where each sits in the framework's login flow."""

from .client import CURRENT, MIGRATED, NEW, UNMATCHED, BatonClient, BatonRefused, BatonUnavailable, BatonUser, SignIn

__all__ = ["CURRENT", "MIGRATED", "NEW", "UNMATCHED", "BatonClient", "BatonRefused", "BatonUnavailable", "BatonUser", "SignIn"]
