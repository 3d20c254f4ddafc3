"""Finds job kinds in every installed app: imports `<app>.kinds` where it exists.

Like Django's admin autodiscovery and Celery's `autodiscover_tasks`: an app
declares its kinds in a module named `kinds` (a module or a package), each
decorated with `@jobs.kinds.register`; the jobs app imports them all at
startup (JobsConfig.ready), so web, worker and scheduler know the same
kinds. An app without such a module is skipped; an error raised while
importing one is not hidden (the process refuses to start with it).
Duplicate names are reported by the system check jobs.E013.

The `tasks` module of every app (but this one) is imported too, so every
`@task` function on the platform's backend is a registered kind in every
process (jobs.taskbackend).
"""

from __future__ import annotations

from importlib import import_module

from django.apps import apps
from django.utils.module_loading import autodiscover_modules, module_has_submodule

# The module name an app declares its kinds in.
MODULE_NAME = "kinds"
# The module name Django's Tasks convention declares `@task` functions in.
TASKS_MODULE_NAME = "tasks"
# Apps whose `tasks` module is not Django tasks (this one's is Celery's).
NOT_DJANGO_TASKS = frozenset({"jobs"})


def autodiscover_kinds() -> list[str]:
    """Import `<app>.kinds` of every installed app that has one; returns their dotted names."""
    autodiscover_modules(MODULE_NAME)
    return [
        f"{config.name}.{MODULE_NAME}"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, MODULE_NAME)
    ]


def autodiscover_tasks() -> list[str]:
    """Import `<app>.tasks` of every installed app but NOT_DJANGO_TASKS; returns their names."""
    found = []
    for config in apps.get_app_configs():
        if config.name in NOT_DJANGO_TASKS or not module_has_submodule(
            config.module, TASKS_MODULE_NAME
        ):
            continue
        import_module(f"{config.name}.{TASKS_MODULE_NAME}")
        found.append(f"{config.name}.{TASKS_MODULE_NAME}")
    return found
