"""Finds job kinds in every installed app: imports `<app>.kinds` where it exists.

Like Django's admin autodiscovery and Celery's `autodiscover_tasks`: an app
declares its kinds in a module named `kinds` (a module or a package), each
decorated with `@jobs.kinds.register`; the jobs app imports them all at
startup (JobsConfig.ready), so web, worker and scheduler know the same
kinds. An app without such a module is skipped; an error raised while
importing one is not hidden (the process refuses to start with it).
Duplicate names are reported by the system check jobs.E013.
"""

from __future__ import annotations

from django.apps import apps
from django.utils.module_loading import autodiscover_modules, module_has_submodule

# The module name an app declares its kinds in.
MODULE_NAME = "kinds"


def autodiscover_kinds() -> list[str]:
    """Import `<app>.kinds` of every installed app that has one; returns their dotted names."""
    autodiscover_modules(MODULE_NAME)
    return [
        f"{config.name}.{MODULE_NAME}"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, MODULE_NAME)
    ]
