"""Routes of the jobs API under /api/."""

from rest_framework.routers import DefaultRouter

from jobs.api.fuses import FuseViewSet
from jobs.api.pauses import PauseViewSet
from jobs.api.views import JobViewSet

app_name = "jobs-api"

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("pauses", PauseViewSet, basename="pause")
router.register("fuses", FuseViewSet, basename="fuse")

urlpatterns = router.urls
