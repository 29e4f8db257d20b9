"""One pass over libsvm/svmlight bytes in numba: data.sparse.read_libsvm's fast path.

`scan(text)` parses `label idx:value ...` lines (blank lines and `#` comments skipped) into
(labels float64, indptr int64, keys uint64, values float64), or returns None at the first thing
it does not accept exactly (the caller then reads line by line, which names the line). Numbers:
decimal digits with an optional sign, point and exponent; a number is converted in numba only
where that is exact (at most 2^53 as an integer mantissa, a power of ten up to 22: one correctly
rounded multiplication or division, Clinger's fast path); any other (17 significant digits, as
repr writes a float64) is converted by Python's float() afterwards, so every value is the nearest
double to its text, as strtod gives.
"""

from __future__ import annotations

import numba
import numpy as np

_POW10 = np.array([10.0**k for k in range(23)])


def scan(text: bytes):
    """(labels, indptr, keys, values) of libsvm `text`, or None (see the module doc)."""
    buf = np.frombuffer(text, np.uint8)
    colons = int(np.count_nonzero(buf == ord(":")))
    lines = int(np.count_nonzero(buf == ord("\n"))) + 1
    out = _scan(buf, colons, lines, _POW10)
    if out is None:
        return None
    labels, indptr, keys, values, slow = out
    for kind, index, start, end in slow.tolist():  # (numbers the fast path could not convert exactly)
        (labels if kind == 0 else values)[index] = float(text[start:end])
    if not (np.isfinite(labels).all() and np.isfinite(values).all()):
        return None
    return labels, indptr, keys, values


@numba.njit(cache=True, nogil=True)
def _space(c):  # pragma: no cover - compiled
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12  # noqa: PLR1714 - numba: no set to build


@numba.njit(cache=True, nogil=True)
def _number(buf, pos, pow10):  # pragma: no cover - compiled
    """(ok, value, exact, end) of the number starting at pos."""
    n = len(buf)
    neg = False
    if pos < n and (buf[pos] == 43 or buf[pos] == 45):
        neg = buf[pos] == 45
        pos += 1
    m = np.uint64(0)
    sig, exp, digits, exact = 0, 0, 0, True
    while pos < n and 48 <= buf[pos] <= 57:
        d = buf[pos] - 48
        digits += 1
        if sig > 0 or d > 0:
            if sig < 19:
                m = m * np.uint64(10) + np.uint64(d)
                sig += 1
            else:
                exp += 1
                exact = False
        pos += 1
    if pos < n and buf[pos] == 46:
        pos += 1
        while pos < n and 48 <= buf[pos] <= 57:
            d = buf[pos] - 48
            digits += 1
            if sig > 0 or d > 0:
                if sig < 19:
                    m = m * np.uint64(10) + np.uint64(d)
                    sig += 1
                    exp -= 1
                else:
                    exact = False
            else:
                exp -= 1
            pos += 1
    if digits == 0:
        return False, 0.0, False, pos
    if pos < n and (buf[pos] == 101 or buf[pos] == 69):
        pos += 1
        eneg = False
        if pos < n and (buf[pos] == 43 or buf[pos] == 45):
            eneg = buf[pos] == 45
            pos += 1
        e, edigits = 0, 0
        while pos < n and 48 <= buf[pos] <= 57:
            if e < 100000:
                e = e * 10 + (buf[pos] - 48)
            edigits += 1
            pos += 1
        if edigits == 0:
            return False, 0.0, False, pos
        exp += -e if eneg else e
    if m == 0:
        value = 0.0
    elif m <= np.uint64(1 << 53) and -22 <= exp <= 22:
        value = float(m) * pow10[exp] if exp >= 0 else float(m) / pow10[-exp]
    else:
        value, exact = 0.0, False
    return True, -value if neg else value, exact, pos


@numba.njit(cache=True, nogil=True)
def _scan(buf, colons, lines, pow10):  # pragma: no cover - compiled
    n = len(buf)
    labels = np.empty(lines)
    indptr = np.zeros(lines + 1, np.int64)
    keys = np.empty(colons, np.uint64)
    values = np.empty(colons)
    slow = np.empty((lines + colons, 4), np.int64)
    nslow, row, e, pos = 0, 0, 0, 0
    big = np.uint64(1844674407370955161)  # (2^64 - 1) // 10: one more digit may overflow
    while pos < n:
        while pos < n and _space(buf[pos]):
            pos += 1
        if pos >= n:
            break
        if buf[pos] == 10:
            pos += 1
            continue
        if buf[pos] == 35:  # '#': a comment line
            while pos < n and buf[pos] != 10:
                pos += 1
            continue
        start = pos
        ok, value, exact, pos = _number(buf, pos, pow10)
        if not ok or (pos < n and not (_space(buf[pos]) or buf[pos] == 10 or buf[pos] == 35)):
            return None
        labels[row] = value
        if not exact:
            slow[nslow, 0], slow[nslow, 1], slow[nslow, 2], slow[nslow, 3] = 0, row, start, pos
            nslow += 1
        while True:
            while pos < n and _space(buf[pos]):
                pos += 1
            if pos >= n or buf[pos] == 10:
                break
            if buf[pos] == 35:
                while pos < n and buf[pos] != 10:
                    pos += 1
                break
            k, kd = np.uint64(0), 0
            while pos < n and 48 <= buf[pos] <= 57:
                d = np.uint64(buf[pos] - 48)
                if k > big or (k == big and d > np.uint64(5)):
                    return None
                k = k * np.uint64(10) + d
                kd += 1
                pos += 1
            if kd == 0 or pos >= n or buf[pos] != 58:
                return None
            pos += 1
            start = pos
            ok, value, exact, pos = _number(buf, pos, pow10)
            if not ok or (pos < n and not (_space(buf[pos]) or buf[pos] == 10 or buf[pos] == 35)):
                return None
            keys[e], values[e] = k, value
            if not exact:
                slow[nslow, 0], slow[nslow, 1], slow[nslow, 2], slow[nslow, 3] = 1, e, start, pos
                nslow += 1
            e += 1
        row += 1
        indptr[row] = e
    return labels[:row], indptr[: row + 1], keys[:e], values[:e], slow[:nslow]
