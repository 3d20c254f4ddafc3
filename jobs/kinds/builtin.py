"""The built-in kinds. Importing this module registers them (JobsConfig.ready); the fault kinds
only with JOBS_FAULT_KINDS."""

from django.conf import settings

from jobs.kinds import (  # noqa: F401 - importing a kind registers it
    bulk,
    csv_summary,
    faults,
    flaky,
    leaky,
    memory_hog,
    prune,
    storm,
    webhook,
)
from jobs.kinds.registry import register

if settings.JOBS_FAULT_KINDS:
    for _fault_kind in (
        *flaky.DEMO_KINDS,
        *faults.FAULT_KINDS,
        *leaky.LEAK_KINDS,
        *memory_hog.MEMORY_KINDS,
        *storm.STORM_KINDS,
    ):
        register(_fault_kind)
