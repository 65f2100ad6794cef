"""allauth's Apple views over BatonAppleOAuth2Adapter (the form-post callback is allauth's own)."""

from allauth.socialaccount.providers.apple.views import apple_post_callback
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView

from .provider import BatonAppleOAuth2Adapter

oauth2_login = OAuth2LoginView.adapter_view(BatonAppleOAuth2Adapter)
oauth2_callback = apple_post_callback
oauth2_finish_login = OAuth2CallbackView.adapter_view(BatonAppleOAuth2Adapter)
