"""Routes of the example app (config/urls.py includes them when the app is installed)."""

from django.urls import path

from example import views

app_name = "example"
urlpatterns = [
    path("word-count/", views.word_count, name="word-count"),
    path("slugify/", views.slugify, name="slugify"),
    path("jobs/<uuid:job_id>/", views.job_detail, name="job"),
    path("jobs/<uuid:job_id>/cancel/", views.job_cancel, name="cancel"),
]
