from django.urls import include, path

urlpatterns = [path("accounts/", include("allauth.urls")), path("_allauth/", include("allauth.headless.urls"))]
