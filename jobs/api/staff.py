"""What the staff APIs (pauses, fuses) share: a permission per action, a body that refuses
unknown fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rest_framework import permissions, serializers
from rest_framework.request import Request

from jobs.api.serializers import refuse_unknown_fields


class StaffActionPermission(permissions.BasePermission):
    """Staff holding the Django permission named for the view's action in `needed`
    (`otherwise` for an action not named there). Subclasses set both."""

    needed: ClassVar[Mapping[str, str]] = {}
    otherwise: str = ""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        action = getattr(view, "action", "") or ""
        perm = self.needed.get(action, self.otherwise)
        return bool(user and user.is_authenticated and user.is_staff and user.has_perm(perm))


class StrictSerializer(serializers.Serializer):
    """A request body whose undeclared fields are refused (400 "Unknown field.")."""

    def validate(self, attrs: dict) -> dict:
        refuse_unknown_fields(self)
        return attrs
