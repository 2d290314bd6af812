"""The Django side of the middleware and decorator tests: settings configured here (no
project directory), this module is ROOT_URLCONF; plain views for the WSGI middleware and
views limited by floodgate's decorators (sync and async)."""

from __future__ import annotations

import django
from django.conf import settings

if not settings.configured:
    settings.configure(DEBUG=False, SECRET_KEY="test-only", MIDDLEWARE=[], INSTALLED_APPS=[],
                       DATABASES={})
    django.setup()
# also when the book's Django example configured the settings first, in this process
settings.ROOT_URLCONF = __name__
settings.ALLOWED_HOSTS = ["*"]

from django.http import HttpResponse, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

from floodgate.decorators import RateLimiter  # noqa: E402

limiter = RateLimiter(retry_after_jitter_s=0.0)


def limited(request):
    return HttpResponse("limited", content_type="text/plain; charset=utf-8")


def free(request):
    return HttpResponse("free")


@limiter.limit("2/minute", name="django-sync")
def decorated(request):
    return HttpResponse("decorated")


@limiter.limit("2/minute", name="django-async")
async def decorated_async(request):
    return JsonResponse({"ok": True})


@limiter.limit("2/minute", name="django-key", key=lambda request: request.headers.get("x-api-key"))
def keyed(request):
    return HttpResponse("keyed")


urlpatterns = [
    path("limited", limited),
    path("free", free),
    path("decorated", decorated),
    path("decorated-async", decorated_async),
    path("keyed", keyed),
]
