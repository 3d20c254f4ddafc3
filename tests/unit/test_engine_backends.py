"""jobs.engine.backends: one backend chosen by the database's vendor."""

from __future__ import annotations

import pytest

from jobs.engine.backends import OrmBackend, PostgresBackend, SqliteBackend, choose


@pytest.mark.parametrize(
    ("vendor", "version", "expected"),
    [
        ("postgresql", (3, 0, 0), PostgresBackend),
        ("sqlite", (3, 35, 0), SqliteBackend),
        ("sqlite", (3, 34, 1), OrmBackend),
        ("mysql", (3, 45, 0), OrmBackend),
    ],
)
def test_backends_choose_by_vendor(
    vendor: str, version: tuple[int, int, int], expected: type
) -> None:
    assert type(choose(vendor, sqlite_version=version)) is expected
