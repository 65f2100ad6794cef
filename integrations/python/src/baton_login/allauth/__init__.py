"""django-allauth glue: `BatonAppleProvider` keeps the raw identity token allauth verified (its own Apple
provider drops it), and `BatonSocialAccountAdapter.pre_social_login` sends it to Baton.

    SOCIALACCOUNT_PROVIDERS = {"apple": {"provider_class": "baton_login.allauth.provider.BatonAppleProvider", …}}
    SOCIALACCOUNT_ADAPTER = "baton_login.allauth.adapter.BatonSocialAccountAdapter"
"""
