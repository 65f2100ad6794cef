from django.contrib.auth import login
from django.http import HttpResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from social_django.utils import psa


@csrf_exempt
@psa()
def native(request, backend):
    """A native app's sign-in: its identity token (and raw nonce, which the Baton step reads) to `do_auth`."""
    user = request.backend.do_auth(request.POST["id_token"])
    if user is None:
        return HttpResponse(status=403)
    login(request, user)
    return HttpResponse(status=200)


urlpatterns = [
    path("", include("social_django.urls", namespace="social")),
    path("native/<str:backend>/", native),
]
