"""The Django project the integration tests run: one framework at a time (BATON_TEST_FRAMEWORK is `allauth` or
`social`), on a PostgreSQL database of its own (conftest.py creates it and sets BATON_TEST_DJANGO_DB)."""

import json
import os

FRAMEWORK = os.environ["BATON_TEST_FRAMEWORK"]
SECRET_KEY = "baton-integration-tests"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = f"project.urls_{FRAMEWORK}"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", **json.loads(os.environ["BATON_TEST_DJANGO_DB"])}}
SESSION_ENGINE = "django.contrib.sessions.backends.db"
BATON_URL = "http://127.0.0.1:9"  # each test names the `baton serve` it started (override_settings)
BATON_LINK_URL = "/account/link-apple/"

INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions", "django.contrib.messages"]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request", "django.contrib.auth.context_processors.auth",
                                       "django.contrib.messages.context_processors.messages"]},
}]
LOGIN_REDIRECT_URL = "/"

if FRAMEWORK == "allauth":
    INSTALLED_APPS += ["allauth", "allauth.account", "allauth.socialaccount", "allauth.headless", "allauth.socialaccount.providers.apple",
                       "allauth.socialaccount.providers.google"]
    MIDDLEWARE += ["allauth.account.middleware.AccountMiddleware"]
    AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend", "allauth.account.auth_backends.AuthenticationBackend"]
    SOCIALACCOUNT_ADAPTER = "baton_login.allauth.adapter.BatonSocialAccountAdapter"
    SOCIALACCOUNT_PROVIDERS = {"apple": {"provider_class": "baton_login.allauth.provider.BatonAppleProvider"}}
    SOCIALACCOUNT_LOGIN_ON_GET = True
    SOCIALACCOUNT_AUTO_SIGNUP = True
    ACCOUNT_EMAIL_VERIFICATION = "none"
elif FRAMEWORK == "social":
    INSTALLED_APPS += ["social_django"]
    AUTHENTICATION_BACKENDS = ["baton_login.social.BatonAppleIdAuth", "django.contrib.auth.backends.ModelBackend"]
    SOCIAL_AUTH_APPLE_ID_SCOPE = ["email", "name"]
    SOCIAL_AUTH_PIPELINE = (
        "social_core.pipeline.social_auth.social_details",
        "social_core.pipeline.social_auth.social_uid",
        "social_core.pipeline.social_auth.auth_allowed",
        "baton_login.social.sign_in",
        "social_core.pipeline.social_auth.social_user",
        "social_core.pipeline.user.get_username",
        "social_core.pipeline.user.create_user",
        "social_core.pipeline.social_auth.associate_user",
        "social_core.pipeline.social_auth.load_extra_data",
        "social_core.pipeline.user.user_details",
    )
else:
    raise ValueError(f"BATON_TEST_FRAMEWORK must be allauth or social, not {FRAMEWORK!r}")
