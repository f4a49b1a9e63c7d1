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

from numba import njit

__all__ = ["plain_lines"]

_SPACE, _TAB, _CR, _LF = 32, 9, 13, 10
_MINUS, _PLUS, _DOT = 45, 43, 46
#: integers of at most this many digits fit in int64
_MAX_DIGITS = 18


@njit(cache=True)
def _digits_end(buf, i):
    """The end of the run of decimal digits starting at ``i``."""
    n = buf.size
    while i < n and 48 <= buf[i] <= 57:
        i += 1
    return i


@njit(cache=True)
def _integer_end(buf, i, signed):
    """The end of an integer token at ``i`` (``-``? then 1 to 18 digits;
    indices take no sign), or -1."""
    if signed and i < buf.size and buf[i] == _MINUS:
        i += 1
    j = _digits_end(buf, i)
    if j == i or j - i > _MAX_DIGITS:
        return -1
    return j


@njit(cache=True)
def _real_end(buf, i):
    """The end of a real token at ``i``, ``-?(d+(.d*)?|.d+)([eE][+-]?d+)?``, or -1."""
    n = buf.size
    if i < n and buf[i] == _MINUS:
        i += 1
    j = _digits_end(buf, i)
    digits = j - i
    if j < n and buf[j] == _DOT:
        k = _digits_end(buf, j + 1)
        digits += k - j - 1
        j = k
    if digits == 0:
        return -1
    if j < n and (buf[j] == 101 or buf[j] == 69):        # e, E
        j += 1
        if j < n and (buf[j] == _PLUS or buf[j] == _MINUS):
            j += 1
        k = _digits_end(buf, j)
        if k == j:
            return -1
        j = k
    return j


@njit(cache=True)
def _blanks_end(buf, i):
    n = buf.size
    while i < n and (buf[i] == _SPACE or buf[i] == _TAB):
        i += 1
    return i


@njit(cache=True)
def plain_lines(buf, nindex, nvalue, integer_values):
    """The number of lines of ``buf`` (uint8) if every line is a plain entry
    line, else -1.

    A plain line is ``nindex`` unsigned integers then ``nvalue`` numbers
    (integers if ``integer_values``, else reals), separated by spaces or
    tabs, with optional blanks before, blanks and a ``\\r`` after, and a
    ``\\n`` at its end (the last line may lack it). Not collective.
    """
    n = buf.size
    ntokens = nindex + nvalue
    lines = 0
    i = 0
    while i < n:
        for t in range(ntokens):
            i = _blanks_end(buf, i)
            if t < nindex:
                i = _integer_end(buf, i, False)
            elif integer_values:
                i = _integer_end(buf, i, True)
            else:
                i = _real_end(buf, i)
            if i < 0:
                return -1
            # a token ends at a blank, or at the line's end after the last one
            if t + 1 < ntokens and not (i < n and (buf[i] == _SPACE or buf[i] == _TAB)):
                return -1
        i = _blanks_end(buf, i)
        if i < n and buf[i] == _CR:
            i += 1
        if i < n:
            if buf[i] != _LF:
                return -1
            i += 1
        lines += 1
    return lines

