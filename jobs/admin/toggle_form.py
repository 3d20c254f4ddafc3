"""The form base of the operator-toggled rows (pauses, fuses): one readable line per refusal."""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.core.exceptions import ValidationError

from jobs.errors import JobsError


class ToggleForm(forms.ModelForm):
    """`check(data)` raises JobsError for a refused row; a duplicate says `exists_message`."""

    exists_message: ClassVar[str] = "That row exists already."

    def check(self, data: dict[str, Any]) -> None:
        """Raise JobsError when the row's fields name something that cannot be toggled."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            self.check(data)
        except JobsError as exc:
            raise ValidationError(str(exc)) from None
        return data

    def validate_unique(self) -> None:
        try:
            super().validate_unique()
        except ValidationError:
            raise ValidationError(self.exists_message) from None
