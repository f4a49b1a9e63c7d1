"""The byte scan that decides whether a piece of a Matrix Market file is in
the plain form that :mod:`dmsolve._mmread` hands to ``fast_matrix_market``.

``fast_matrix_market`` converts numbers exactly (as ``scipy.io.mmread``
does) but ignores whatever follows the last number of a line, so that
``1 2 3.5 7`` or ``1 2 3.5abc`` would be read as ``1 2 3.5``. This scan
accepts only lines it cannot misread: each holds exactly the expected
numbers, written in the strict grammar below. Any other piece (comments,
blank lines, signs ``+``, ``nan``, stray text, ...) goes to the checking
reader, which accepts what it can and names the line of what it cannot.
"""

from __future__ import annotations

from .jit import njit

__all__ = ["plain_lines"]

_SPACE, _TAB, _CR, _LF = 32, 9, 13, 10
_MINUS, _PLUS, _DOT, _E, _SMALL_E = 45, 43, 46, 69, 101
_ZERO, _NINE = 48, 57
#: integers of at most this many digits fit in int64
_MAX_DIGITS = 18


# One function with the token rules written out: numba compiles calls to
# small helpers here into code two to three times slower.
@njit(cache=True, nogil=True)
def plain_lines(buf, nindex, nvalue, integer_values):
    """The number of lines of ``buf`` (uint8) if every line is a plain entry
    line, else -1.

    A plain line is ``nindex`` indices then ``nvalue`` values, separated by
    spaces or tabs, with optional blanks before, blanks and a ``\\r`` after,
    and a ``\\n`` at its end (the last line may lack it). An index is 1 to
    18 digits; an integer value the same after an optional ``-``; a real
    value ``-?(d+(.d*)?|.d+)([eE][+-]?d+)?``. Not collective.
    """
    n = buf.size
    ntokens = nindex + nvalue
    lines = 0
    i = 0
    while i < n:
        for t in range(ntokens):
            while i < n and (buf[i] == _SPACE or buf[i] == _TAB):
                i += 1
            if t < nindex or integer_values:
                if t >= nindex and i < n and buf[i] == _MINUS:
                    i += 1
                start = i
                while i < n and _ZERO <= buf[i] <= _NINE:
                    i += 1
                if i == start or i - start > _MAX_DIGITS:
                    return -1
            else:
                if i < n and buf[i] == _MINUS:
                    i += 1
                start = i
                while i < n and _ZERO <= buf[i] <= _NINE:
                    i += 1
                digits = i - start
                if i < n and buf[i] == _DOT:
                    i += 1
                    start = i
                    while i < n and _ZERO <= buf[i] <= _NINE:
                        i += 1
                    digits += i - start
                if digits == 0:
                    return -1
                if i < n and (buf[i] == _SMALL_E or buf[i] == _E):
                    i += 1
                    if i < n and (buf[i] == _PLUS or buf[i] == _MINUS):
                        i += 1
                    start = i
                    while i < n and _ZERO <= buf[i] <= _NINE:
                        i += 1
                    if i == start:
                        return -1
            # a token ends at a blank, or at the line's end after the last one
            if t + 1 < ntokens and not (i < n and (buf[i] == _SPACE or buf[i] == _TAB)):
                return -1
        while i < n and (buf[i] == _SPACE or buf[i] == _TAB):
            i += 1
        if i < n and buf[i] == _CR:
            i += 1
        if i < n:
            if buf[i] != _LF:
                return -1
            i += 1
        lines += 1
    return lines
