"""Top-level routes: the API, its OpenAPI schema, the admin, /healthz and /metrics."""

from django.conf import settings
from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.http import HttpRequest, JsonResponse
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from jobs.telemetry.exporters import metrics_view


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


# Exempt from CSRF: it changes nothing, and a POST to a mistyped API path
# must get this 404 in the API's shape, not Django's HTML 403 page.
@csrf_exempt
def api_not_found(request: HttpRequest) -> JsonResponse:
    detail = f"No API endpoint at {request.path}."
    return JsonResponse(
        {"detail": detail, "errors": [{"field": "path", "reason": detail}]}, status=404
    )


urlpatterns = [
    path("api/", include("jobs.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    # Anything else under /api/ answers in the API's error shape, not Django's HTML page.
    re_path(r"^api/", api_not_found),
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("metrics", metrics_view, name="metrics"),
]

if "example" in settings.INSTALLED_APPS:  # local and test settings only (example/)
    urlpatterns.append(path("example/", include("example.urls")))

if settings.DEBUG:
    # Admin CSS/JS under gunicorn in development; production serves STATIC_ROOT.
    urlpatterns += staticfiles_urlpatterns()
