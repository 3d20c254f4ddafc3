"""The platform's URLs plus the baseline views under /bench/."""

from django.urls import path

from bench.baseline import views
from config.urls import urlpatterns as platform_urlpatterns

urlpatterns = [
    path("bench/bare/", views.bare_delay),
    path("bench/inprocess/cpu/", views.inprocess_cpu),
    *platform_urlpatterns,
]
