"""Exceptions named after a failed attempt's own error, for Celery's FAILURE and RETRY states.

Flower shows a failed task's exception as `repr(exc)` and celery-exporter
labels `celery_task_failed_total` with the class name in front of the
parenthesis. So the attempt task raises an exception whose class is named
exactly as the attempt's error (`ConnectionError('refused')`), even when
that error was recorded from another process (a hard time limit, a lost
child) or cannot be raised as is (AttemptAbort is a BaseException).

Each name gets one subclass of AttemptError, created on first use and
cached. The classes live in this module's namespace through a module
`__getattr__` (PEP 562), so pickle finds them by name: a prefork child sends
the exception to the worker's main process pickled, and the main process
recreates the same class.
"""

from __future__ import annotations

import keyword

__all__ = ["AttemptError", "error_class"]


class AttemptError(Exception):
    """Base of every exception the attempt task raises for a failed attempt."""


_classes: dict[str, type[AttemptError]] = {"AttemptError": AttemptError}


def error_class(name: str) -> type[AttemptError]:
    """The AttemptError subclass named `name` (AttemptError itself for an unusable name).

    `name` is an exception class name as recorded on the attempt
    (`Attempt.error_type`); a name that is not a Python identifier, or
    starts with an underscore, maps to AttemptError. Never raises.
    """
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        name = "AttemptError"
    cls = _classes.get(name)
    if cls is None:
        cls = type(name, (AttemptError,), {"__module__": __name__, "__qualname__": name})
        _classes[name] = cls
    return cls


def __getattr__(name: str) -> type[AttemptError]:
    # Only for pickle's lookup of a class made by error_class() in another process.
    if name.startswith("_") or not name.isidentifier():
        raise AttributeError(name)
    return error_class(name)
