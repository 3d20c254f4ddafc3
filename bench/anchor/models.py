"""The anchor's own table: what an ordinary project stores for work it accepted (no extra index)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class Submission(models.Model):
    """One accepted request: its kind, payload and time; the task gets its id."""

    kind = models.CharField(max_length=100)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects: ClassVar[models.Manager[Submission]] = models.Manager()

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk}"
