"""The anchor's URLs: the submit view and a health probe."""

from django.urls import path

from bench.anchor import views

urlpatterns = [
    path("submit/", views.Submit.as_view()),
    path("healthz", views.healthz),
]
