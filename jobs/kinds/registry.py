"""The kind registry: `@register` on a Kind subclass makes it submittable.

Kinds come from the built-in package (jobs.kinds) and from the `kinds`
module of every installed app (jobs.kinds.discovery). A name registered by
two different classes keeps the first and is recorded as a conflict: the
system check jobs.E013 names both modules and refuses to start.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from jobs.kinds.base import Kind
from jobs.policy import Policy

_KINDS: dict[str, Kind] = {}
_CONFLICTS: list[Conflict] = []


@dataclass(frozen=True)
class Conflict:
    """Two classes registered under one kind name: `first` kept, `second` refused (dotted paths)."""

    name: str
    first: str
    second: str


class UnknownKind(LookupError):
    """No kind of that name is registered."""


def _dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: register one instance of `cls` under `cls.name`.

    A name already taken by another class is not replaced: the clash is
    recorded for the system check jobs.E013 (duplicate_kinds()).
    Registering the same class twice is a no-op.
    """
    existing = _KINDS.get(cls.name)
    if existing is not None and type(existing) is not cls:
        if _dotted(type(existing)) != _dotted(cls):  # a module imported twice is the same kind
            _CONFLICTS.append(Conflict(cls.name, _dotted(type(existing)), _dotted(cls)))
            return cls
    _KINDS[cls.name] = cls()
    return cls


def register_instance(kind: Kind, *, origin: str) -> None:
    """Register an already built kind (a Django task's, jobs.taskbackend) defined at `origin`.

    A name held by a kind from another origin is recorded as a conflict
    (jobs.E013) and not replaced; from the same origin it is kept as is.
    """
    existing = _KINDS.get(kind.name)
    if existing is None:
        _KINDS[kind.name] = kind
        return
    existing_origin = getattr(existing, "origin", _dotted(type(existing)))
    if existing_origin != origin:
        _CONFLICTS.append(Conflict(kind.name, existing_origin, origin))


def duplicate_kinds() -> list[Conflict]:
    """Every name two classes tried to register, in the order they were found."""
    return list(_CONFLICTS)


def get_kind(name: str) -> Kind:
    """The registered kind called `name`. Raises UnknownKind."""
    try:
        return _KINDS[name]
    except KeyError:
        raise UnknownKind(
            f"unknown kind {name!r}; known kinds: {', '.join(sorted(_KINDS))}"
        ) from None


def kind_names() -> list[str]:
    """Names of every registered kind, sorted."""
    return sorted(_KINDS)


def policy_for(name: str) -> Policy:
    """The kind's Policy with `settings.JOBS_KIND_OVERRIDES[name]` applied.

    Raises UnknownKind, or ValueError when the override is invalid.
    """
    kind = get_kind(name)
    overrides = settings.JOBS_KIND_OVERRIDES.get(name) or {}
    return kind.policy.with_overrides(overrides) if overrides else kind.policy
