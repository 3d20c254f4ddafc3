"""jobs.db.is_unavailable: which database errors mean "not now" (retry, 503, spool), not a bug."""

from __future__ import annotations

import pytest
from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    OperationalError,
    ProgrammingError,
)

from jobs.db import is_unavailable


class _DriverError(Exception):
    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


def _wrapped(cls: type[DatabaseError], sqlstate: str | None) -> DatabaseError:
    error = cls("from the driver")
    error.__cause__ = _DriverError(sqlstate)
    return error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OperationalError("server closed the connection unexpectedly"), True),
        (InterfaceError("connection already closed"), True),
        # a failover onto a standby: writes refused, as Django's InternalError
        (_wrapped(InternalError, "25006"), True),
        (_wrapped(OperationalError, "57P01"), True),  # admin shutdown
        (_wrapped(InternalError, "57P03"), True),  # cannot connect now (starting up)
        (_wrapped(OperationalError, "53300"), True),  # too many connections
        (_wrapped(DatabaseError, "08006"), True),  # connection failure
        (_wrapped(IntegrityError, "23505"), False),  # unique violation: the caller's to handle
        (_wrapped(DataError, "22P05"), False),  # a value the database cannot store
        (_wrapped(ProgrammingError, "42P01"), False),  # missing table: a bug, not an outage
        (_wrapped(InternalError, None), False),
        (ValueError("not a database error"), False),
    ],
)
def test_is_unavailable(error: BaseException, expected: bool) -> None:
    assert is_unavailable(error) is expected
