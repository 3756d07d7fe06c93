"""A CPU-time budget for sympy's parse and verify (the math reward of paper App. B.1.2 never hangs, and its verdict
does not depend on the machine's load).

:func:`time_budget` raises :class:`BudgetExceeded` in the block once the calling thread has spent its CPU seconds (its
own clock, ``pthread_getcpuclockid``; wall-clock time where a platform has no per-thread clock): waiting for the GIL or
for a busy machine costs nothing, so a reward pooled over 8 threads, or on a loaded machine, gives the verdicts of a
serial one. A watchdog thread (:class:`_Watchdog`, ``PyThreadState_SetAsyncExc``) delivers it, in any thread, the
main one included; it is raised again every 10 ms until the block is left, never inside an import, and preferably in
a frame of the parser/verifier (:data:`_INTERRUPTIBLE`). math-verify's own integer-second alarms are disabled (they
would clash with this one).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

# --------------------------------------------------------------------------------------------------
# CPU-time budget of the calling thread (a watchdog thread delivers it)
# --------------------------------------------------------------------------------------------------


class BudgetExceeded(BaseException):
    """Raised inside sympy when the CPU budget is spent. A BaseException, so that the ``except Exception`` blocks
    inside math-verify and sympy do not swallow it."""


_REFIRE_S = 0.01  # after the budget, raise again every 10 ms: C code that swallows exceptions (dict lookups
# calling a Python __eq__, as antlr4's prediction contexts do) must not absorb the only one
_PATIENCE = 20  # deliveries (200 ms) to wait for a frame of _INTERRUPTIBLE before raising wherever the code is
# the parser/verifier's packages, and the math task's own modules (trgrpo.tasks.math and trgrpo.tasks.math_*)
_INTERRUPTIBLE = ("sympy", "mpmath", "antlr4", "latex2sympy2_extended", "math_verify", f"{__package__}.math")


def _in_import(frame: Any) -> bool:
    """True when an import is running somewhere in the stack of ``frame``."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _thread_clock(thread_id: int) -> int | None:
    """The CPU-time clock of a thread (None where the platform has none: the budget is then wall-clock time)."""
    try:
        return time.pthread_getcpuclockid(thread_id)
    except (AttributeError, OSError):
        return None


def _now(clock: int | None) -> float:
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


class _Watchdog:
    """One daemon thread that raises :class:`BudgetExceeded` in other threads once they have spent their CPU budget.

    A thread's CPU time grows no faster than wall time, so the watchdog sleeps for the budget left and then reads the
    thread's clock again. The exception is delivered with ``PyThreadState_SetAsyncExc`` (at the target's next
    bytecode, like a signal handler's), again every 10 ms until the budget is disarmed, never inside an import, and
    preferably in a frame of the parser/verifier. Disarming under the lock also cancels a delivery that is still
    pending, so nothing fires after the block is left.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: dict[int, dict[str, Any]] = {}  # token -> thread id, clock, start, budget, next check, fires
        self._next = 0
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float) -> int:
        ident = threading.get_ident()
        clock = _thread_clock(ident)
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="trgrpo-math-budget", daemon=True)
                self._thread.start()
            self._next += 1
            self._jobs[self._next] = dict(
                ident=ident, clock=clock, start=_now(clock), budget=seconds, due=time.monotonic() + seconds, fires=0
            )
            self._cond.notify()
            return self._next

    def disarm(self, token: int) -> None:
        with self._cond:
            job = self._jobs.pop(token, None)
            if job is not None and job["fires"]:
                _set_async_exc(job["ident"], None)  # cancel a delivery still pending

    def _run(self) -> None:
        import sys

        with self._cond:
            while True:
                now = time.monotonic()
                for job in [j for j in self._jobs.values() if j["due"] <= now]:
                    if not job["fires"]:
                        try:
                            left = job["budget"] - (_now(job["clock"]) - job["start"])
                        except OSError:  # the thread is gone
                            left = 0.0
                        if left > 0:  # descheduled or waiting for the GIL: not spent yet
                            job["due"] = now + max(left, 1e-3)
                            continue
                    job["due"] = now + _REFIRE_S
                    job["fires"] += 1
                    frame = sys._current_frames().get(job["ident"])
                    if frame is None or _in_import(frame):
                        continue
                    module = frame.f_globals.get("__name__", "")
                    if module.startswith(_INTERRUPTIBLE) or job["fires"] > _PATIENCE:
                        _set_async_exc(job["ident"], BudgetExceeded)
                wait = min((job["due"] for job in self._jobs.values()), default=now + 60) - time.monotonic()
                self._cond.wait(timeout=max(wait, 1e-3))


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):  # a forked child has no watchdog thread, and maybe a lock held at the fork
    os.register_at_fork(after_in_child=_WATCHDOG.__init__)


@contextlib.contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """Raise :class:`BudgetExceeded` in the block once this thread has used ``seconds`` of CPU time, in any thread.

    A no-op for ``None``/``<= 0``. The :class:`_Watchdog` thread delivers it; once the budget is spent the exception
    is raised again every 10 ms until the block is left. Only a single long C call (one huge integer power) cannot be
    interrupted: :func:`_is_blowup` refuses those before they run. No signal or timer of the process is touched.
    """
    if not seconds or seconds <= 0:
        yield
        return
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

