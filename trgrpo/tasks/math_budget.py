"""A wall-clock budget for sympy's parse and verify (the math reward of paper App. B.1.2 never hangs).

:func:`time_budget` raises :class:`BudgetExceeded` in the block once its time is spent, in any thread: SIGALRM with
sub-second resolution in the main thread, a watchdog thread (:class:`_Watchdog`, ``PyThreadState_SetAsyncExc``)
elsewhere. The exception is raised again every 10 ms until the block is left, never inside an import, and
preferably in a frame of the parser/verifier (:data:`_INTERRUPTIBLE`). math-verify's own integer-second alarms are
disabled (they would clash with this one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

# --------------------------------------------------------------------------------------------------
# Time budget (SIGALRM in the main thread, a watchdog thread elsewhere)
# --------------------------------------------------------------------------------------------------


class BudgetExceeded(BaseException):
    """Raised inside sympy when the wall-clock budget is spent. A BaseException, so that the ``except
    Exception`` blocks inside math-verify and sympy do not swallow it."""


def _can_use_alarm() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


_REFIRE_S = 0.01  # after the budget, raise again every 10 ms: C code that swallows exceptions (dict lookups
# calling a Python __eq__, as antlr4's prediction contexts do) must not absorb the only one
_PATIENCE = 20  # alarms (200 ms) to wait for a frame of _INTERRUPTIBLE before raising wherever the code is
# the parser/verifier's packages, and the math task's own modules (trgrpo.tasks.math and trgrpo.tasks.math_*)
_INTERRUPTIBLE = ("sympy", "mpmath", "antlr4", "latex2sympy2_extended", "math_verify", f"{__package__}.math")


def _in_import(frame: Any) -> bool:
    """True when an import is running somewhere in the stack of ``frame``."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class _Watchdog:
    """One daemon thread that raises :class:`BudgetExceeded` in other threads once their budget is spent.

    The exception is delivered with ``PyThreadState_SetAsyncExc`` (at the target's next bytecode, like a signal
    handler's), again every 10 ms until the budget is disarmed, never inside an import, and preferably in a frame
    of the parser/verifier (as :func:`time_budget` does with SIGALRM in the main thread). Disarming under the lock
    also cancels a delivery that is still pending, so nothing fires after the block is left.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: dict[int, list[Any]] = {}  # token -> [thread id, next deadline, fires]
        self._next = 0
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float) -> int:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="trgrpo-math-budget", daemon=True)
                self._thread.start()
            self._next += 1
            self._jobs[self._next] = [threading.get_ident(), time.monotonic() + seconds, 0]
            self._cond.notify()
            return self._next

    def disarm(self, token: int) -> None:
        with self._cond:
            job = self._jobs.pop(token, None)
            if job is not None and job[2]:
                _set_async_exc(job[0], None)  # cancel a delivery still pending

    def _run(self) -> None:
        import sys

        with self._cond:
            while True:
                now = time.monotonic()
                due = [(tok, job) for tok, job in self._jobs.items() if job[1] <= now]
                for _tok, job in due:
                    job[1] = now + _REFIRE_S
                    job[2] += 1
                    frame = sys._current_frames().get(job[0])
                    if frame is None or _in_import(frame):
                        continue
                    module = frame.f_globals.get("__name__", "")
                    if module.startswith(_INTERRUPTIBLE) or job[2] > _PATIENCE:
                        _set_async_exc(job[0], BudgetExceeded)
                wait = min((job[1] for job in self._jobs.values()), default=now + 60) - time.monotonic()
                self._cond.wait(timeout=max(wait, 1e-3))


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):  # a forked child has no watchdog thread, and maybe a lock held at the fork
    os.register_at_fork(after_in_child=_WATCHDOG.__init__)


@contextlib.contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """Raise :class:`BudgetExceeded` in the block after ``seconds`` of wall-clock time, in any thread.

    A no-op for ``None``/``<= 0``. In the main thread: SIGALRM; elsewhere: the :class:`_Watchdog` thread. Once
    the budget is spent the exception is raised again every 10 ms until the block is left. Only a single long C
    call (one huge integer power) cannot be interrupted: :func:`_is_blowup` refuses those before they run. In the
    main thread the previous SIGALRM handler is restored and a timer that was already running is re-armed, minus
    the time spent here.
    """
    if not seconds or seconds <= 0:
        yield
        return
    if not _can_use_alarm():
        token = _WATCHDOG.arm(seconds)
        try:
            yield
        finally:
            while True:  # a late delivery may land in here: retry until the disarm has run whole
                try:
                    _WATCHDOG.disarm(token)
                    break
                except BudgetExceeded:
                    continue
        return
    state = {"armed": True, "fires": 0}

    def _handler(signum: int, frame: Any) -> None:
        if not state["armed"]:
            return
        state["fires"] += 1
        if _in_import(frame):
            return  # never break an import: it would leave a half-initialised module behind (sympy.printing)
        module = frame.f_globals.get("__name__", "") if frame is not None else ""
        # Raise where the exception propagates cleanly: in the parser/verifier. An exception raised in a gc callback
        # or a __del__ is only printed ("Exception ignored in ..."); there, wait for the next alarm (or give up
        # waiting after _PATIENCE alarms).
        if module.startswith(_INTERRUPTIBLE) or state["fires"] > _PATIENCE:
            raise BudgetExceeded()

    t0 = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, _handler)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds, _REFIRE_S)
    try:
        yield
    finally:
        # A late alarm may land in here before "armed" is cleared: retry until the clean-up has run whole.
        while True:
            try:
                state["armed"] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old_handler if old_handler is not None else signal.SIG_DFL)
                if old_delay > 0:  # someone else's timer was running: give it back what is left
                    left = max(old_delay - (time.monotonic() - t0), 1e-3)
                    signal.setitimer(signal.ITIMER_REAL, left, old_interval)
                break
            except BudgetExceeded:
                continue

