"""allauth's Apple URLs (the same paths and names) over this package's views; allauth's `allauth.urls` includes
them through the provider's package."""

from allauth.socialaccount.providers.oauth2.urls import default_urlpatterns
from django.urls import path

from .provider import BatonAppleProvider
from .views import oauth2_finish_login

urlpatterns = default_urlpatterns(BatonAppleProvider) + [
    path(f"{BatonAppleProvider.get_slug()}/login/callback/finish/", oauth2_finish_login, name="apple_finish_callback"),
]
