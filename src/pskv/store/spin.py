"""Stripe locks: process-local `threading.Lock`s, and beside them spinlocks in shared memory that
the processes of one host take around a co-located shard's rows (store.shm).

A spinlock is one int32 word: 0 free, else the holder's PID. It is taken with an atomic
compare-and-swap and released with a release-ordered store, in numba kernels (nogil) built on
llvmlite's `cmpxchg` and atomic store, so a holder's writes to the rows are visible to the next
holder in any process. A `with` over `Held` takes the process-local locks first and then the
shared words, each set in increasing stripe order, so no two holders wait for each other in a
cycle; a waiter that spins too long yields its core (`os.sched_yield`, which releases the GIL) a
few times, then naps between rounds (a holder that long is off its core: spinning would only
burn the waiter's, the CPU a second process should not cost), and after a second it frees words
whose holder process is dead (killed while it held them: its rows may be half-written, as a
message half-applied would be; a dead process's requests are lost either way).

Threads and ownership: any thread. A `Held` is made once per stripe set and shared.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import cast

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

STRIDE = 16  # int32 words per stripe: one 64-byte cache line each, so two processes taking
# different stripes do not pass one line back and forth
SPINS = 2000  # CAS tries per stripe before the kernel returns to yield (a row op holds a lock ~1-50 us)
YIELDS = 4  # rounds of spinning that yield the core in between; then each round naps first
NAP = 50e-6  # seconds (Linux wakes a sleeper ~50-100 us later): a preempted holder needs ms
DEAD_AFTER = 1.0  # seconds of waiting before checking whether the holder still lives


@intrinsic
def _cas_intrinsic(typingctx, arr, idx, expected, desired):
    """arr[idx]: expected -> desired atomically; returns the value found (== expected: swapped)."""
    sig = types.int32(arr, idx, types.int32, types.int32)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]])
        res = builder.cmpxchg(ptr, args[2], args[3], "acq_rel", "monotonic")
        return builder.extract_value(res, 0)

    return sig, codegen


@intrinsic
def _store_release_intrinsic(typingctx, arr, idx, value):
    """arr[idx] = value, ordered after every earlier write of this thread (an unlock)."""
    sig = types.void(arr, idx, types.int32)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]])
        builder.store_atomic(args[2], ptr, "release", 4)
        return context.get_dummy_value()

    return sig, codegen


# as kernels call them (numba's annotations keep the typing context in an intrinsic's call signature)
cas = cast(Callable[[np.ndarray, int, np.int32, np.int32], int], _cas_intrinsic)
store_release = cast(Callable[[np.ndarray, int, np.int32], None], _store_release_intrinsic)


@numba.njit(nogil=True, cache=True)
def _acquire_from(words, mask, first, me, spins):
    """Take the words of the stripes in `mask` from stripe `first` on, in order; returns the first
    stripe not taken (64 when all are held)."""
    for s in range(first, 64):
        if not (mask >> s) & 1:
            continue
        n = 0
        while cas(words, s * STRIDE, np.int32(0), me) != 0:
            n += 1
            if n >= spins:
                return s
    return 64


@numba.njit(nogil=True, cache=True)
def _release(words, mask):
    for s in range(64):
        if (mask >> s) & 1:
            store_release(words, s * STRIDE, np.int32(0))


@numba.njit(nogil=True, cache=True)
def _swap(words, s, expected, desired):
    return cas(words, s, expected, desired)


def alive(pid: int) -> bool:
    """Process `pid` may still run. A zombie cannot: dead, not yet reaped (pskv's launcher reaps
    its nodes only at the end of a run, so that their PIDs are not reused meanwhile)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (someone else's process: alive)
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[:1]
    except OSError:  # (no /proc: what kill says)
        return True
    return state not in ([b"Z"], [b"X"])


_watches: list = []  # callables that raise when this process must stop waiting (its node failed or closed)


def watch(check) -> None:
    """`check()` runs once a second while a stripe stays held by a live process; it raises to stop the
    wait (the node's health check: a holder that is stopped, not dead, held it for good, and once
    the node has failed nothing it waits for matters; store.Store and node.sharing register it)."""
    _watches.append(check)


def unwatch(check) -> None:
    if check in _watches:
        _watches.remove(check)


def still_waiting() -> None:
    """Run the watches (see watch); raises what one raises."""
    for check in list(_watches):
        check()


def free_if_dead(words: np.ndarray, s: int, me) -> None:
    """Free stripe `s`'s word if the process holding it has died (killed while it held it)."""
    holder = int(words[s * STRIDE])
    if holder and holder != me and not alive(holder):
        _swap(words, s * STRIDE, np.int32(holder), np.int32(0))


def acquire(words: np.ndarray, mask: int, me: int) -> None:
    """Take the shared words of `mask`'s stripes (see the module docstring); returns when all are held."""
    s = _acquire_from(words, mask, 0, me, SPINS)
    waited_since = None
    rounds = 0
    while s < 64:
        rounds += 1
        if rounds <= YIELDS:
            os.sched_yield()
        else:  # the holder is off its core (preempted): sleep, do not burn ours
            time.sleep(NAP)
        s = _acquire_from(words, mask, s, me, SPINS)
        if s < 64:
            now = time.monotonic()
            if waited_since is None:
                waited_since = now
            elif now - waited_since > DEAD_AFTER:
                free_if_dead(words, s, me)
                waited_since = now
                try:
                    still_waiting()
                except BaseException:
                    _release(words, mask & ((1 << s) - 1))  # the stripes taken before s
                    raise


def release(words: np.ndarray, mask: int) -> None:
    _release(words, mask)


class Held:
    """Holds a list of process-local locks, then (shared shards) the shared words of the same
    stripes, for a `with` block (a class: cheaper per call than @contextmanager). `check`, if
    given, runs once all are held and may raise after releasing them (store.peer: the shard moved)."""

    __slots__ = ("_locks", "_words", "_mask", "_me", "_check")

    def __init__(self, locks: list, words: np.ndarray | None = None, mask: int = 0, check=None) -> None:
        self._locks = locks
        self._words = words
        self._mask = mask
        self._me = np.int32(os.getpid())
        self._check = check

    def __enter__(self) -> None:
        for lock in self._locks:
            lock.acquire()
        if self._words is not None:
            try:
                acquire(self._words, self._mask, self._me)
            except BaseException:  # (a watch stopped the wait)
                for lock in self._locks:
                    lock.release()
                raise
            if self._check is not None:
                try:
                    self._check()
                except BaseException:
                    self.__exit__()
                    raise

    def __exit__(self, *exc) -> None:
        if self._words is not None:
            _release(self._words, self._mask)
        for lock in self._locks:
            lock.release()
