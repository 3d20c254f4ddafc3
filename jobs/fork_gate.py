"""The fork gate: a process forks only while none of its other threads is at work.

DESIGN ("Faults"); the reasons and the list of threads are in docs/forking.md.
A thread of a process that forks (the Celery worker's main process, for its
whole life) is started with `start_thread()` or passed to `register()`, and
does its work inside `section(name)`, short and bounded; between sections it
only waits. os.register_at_fork hooks make every fork wait until no other
thread is inside a section (at most WAIT_LIMIT_SECONDS, then an error) and
keep new sections out through the fork. A fork beside an unregistered live
thread logs that thread's name once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=threading.Thread)

# Longest a fork waits for sections to end (seconds).
WAIT_LIMIT_SECONDS = 30.0
# A fork that waited longer than this is logged (seconds).
LOG_WAIT_SECONDS = 0.05


class ForkGate:
    """Sections of work that a fork of this process waits for; see the module docstring."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # Also the forked child's fresh start: the parent's lock was held
        # across the fork, and the parent's other threads do not exist here.
        self._cond = threading.Condition(threading.Lock())
        self._inside: dict[int, list[str]] = {}
        self._registered: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self._warned: set[str] = set()
        self._waited = 0.0
        self._waited_for = ""
        self.forks = 0
        self.waited_seconds = 0.0
        self.longest_wait_seconds = 0.0

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Run the block with no fork of this process under way; a fork waits for it to end."""
        me = threading.get_ident()
        with self._cond:
            self._inside.setdefault(me, []).append(name)
        try:
            yield
        finally:
            with self._cond:
                names = self._inside[me]
                names.pop()
                if not names:
                    del self._inside[me]
                    self._cond.notify_all()

    def register(self, thread: T) -> T:
        """Declare `thread` as one that works only inside sections; returns it."""
        self._registered.add(thread)
        return thread

    def start_thread(self, target: Callable[[], object], *, name: str) -> threading.Thread:
        """Start a registered daemon thread running `target`."""
        thread = self.register(threading.Thread(target=target, name=name, daemon=True))
        thread.start()
        return thread

    def unregistered_threads(self) -> list[threading.Thread]:
        """Live threads other than the calling one that were not registered."""
        me = threading.current_thread()
        return [
            t
            for t in threading.enumerate()
            if t is not me and t.is_alive() and t not in self._registered
        ]

    # -- os.register_at_fork hooks ---------------------------------------------------

    def before_fork(self) -> None:
        """Wait until no other thread is inside a section; keep new ones out through the fork."""
        me = threading.get_ident()
        self._cond.acquire()  # released by after_fork_in_parent, replaced in the child
        started = time.monotonic()
        self._waited_for = self._busy_names(me)
        deadline = started + WAIT_LIMIT_SECONDS
        while any(ident != me for ident in self._inside):
            left = deadline - time.monotonic()
            if left <= 0:
                logger.error(
                    "forking pid %s after %.0f s with sections still running (%s): "
                    "the child may inherit a lock held for ever",
                    os.getpid(),
                    WAIT_LIMIT_SECONDS,
                    self._busy_names(me),
                )
                break
            self._cond.wait(left)
        self._waited = time.monotonic() - started
        for thread in self.unregistered_threads():
            if thread.name not in self._warned:
                self._warned.add(thread.name)
                logger.warning(
                    "thread %r runs beside a fork of pid %s and is not under jobs.fork_gate: "
                    "a lock it holds at a fork is held for ever in the child",
                    thread.name,
                    os.getpid(),
                )

    def after_fork_in_parent(self) -> None:
        waited = self._waited
        self.forks += 1
        self.waited_seconds += waited
        self.longest_wait_seconds = max(self.longest_wait_seconds, waited)
        self._cond.release()
        if waited > LOG_WAIT_SECONDS:
            logger.info(
                "fork of pid %s waited %.3f s for running sections (%s)",
                os.getpid(),
                waited,
                self._waited_for,
            )

    def after_fork_in_child(self) -> None:
        self._reset()

    def _busy_names(self, me: int) -> str:
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        return ", ".join(
            f"{names.get(ident, ident)}: {'/'.join(sections)}"
            for ident, sections in self._inside.items()
            if ident != me
        )


gate = ForkGate()
os.register_at_fork(
    before=gate.before_fork,
    after_in_parent=gate.after_fork_in_parent,
    after_in_child=gate.after_fork_in_child,
)
section = gate.section
register = gate.register
start_thread = gate.start_thread
