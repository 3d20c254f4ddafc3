"""The kind registry: `@register` on a Kind subclass makes it submittable."""

from __future__ import annotations

from django.conf import settings

from jobs.kinds.base import Kind
from jobs.policy import Policy

_KINDS: dict[str, Kind] = {}


class UnknownKind(LookupError):
    """No kind of that name is registered."""


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: register one instance of `cls` under `cls.name`.

    Raises ValueError when the name is already taken by another class.
    """
    existing = _KINDS.get(cls.name)
    if existing is not None and type(existing) is not cls:
        raise ValueError(f"kind {cls.name!r} is already registered by {type(existing).__name__}")
    _KINDS[cls.name] = cls()
    return cls


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
