"""The plain-line scan (dmsolve/_mmread_kernels.py): the line count of pieces
whose every line holds exactly the expected numbers in the strict grammar,
-1 for anything else (which the checking parse then reads or refuses)."""

import numpy as np
import pytest

from dmsolve._mmread_kernels import plain_lines

# (piece, indices, values, integer values, expected count)
CASES = [
    ("empty", b"", 2, 1, False, 0),
    ("one-line", b"1 2 3.5\n", 2, 1, False, 1),
    ("no-final-newline", b"1 2 3.5\n4 5 6", 2, 1, False, 2),
    ("real-forms", b"1 1 -0.5\n1 1 .5\n1 1 5.\n1 1 1e5\n1 1 -1.25E-07\n1 1 2e+300\n",
     2, 1, False, 6),
    ("blanks-tabs-crlf", b"  1\t2  3.5 \r\n\t4 5\t6\t\n", 2, 1, False, 2),
    ("long-mantissa", b"1 2 0.12345678901234567890123456789\n", 2, 1, False, 1),
    ("integer-values", b"1 2 -7\n3 4 0\n", 2, 1, True, 2),
    ("pattern", b"1 2\n3 4\n", 2, 0, False, 2),
    ("complex", b"1 2 1.5 -2\n", 2, 2, False, 1),
    ("array", b"1.5\n-2\n3e3\n", 0, 1, False, 3),
    ("array-complex", b"1.5 2\n-2 0\n", 0, 2, False, 2),
    ("18-digit-index", b"123456789012345678 1 1\n", 2, 1, False, 1),
    # refused: the checking parse decides
    ("extra-number", b"1 2 3.5 7\n", 2, 1, False, -1),
    ("too-few", b"1 2\n", 2, 1, False, -1),
    ("text-after-value", b"1 2 3.5abc\n", 2, 1, False, -1),
    ("hex", b"1 2 0x10\n", 2, 1, False, -1),
    ("two-exponents", b"1 2 1e5e5\n", 2, 1, False, -1),
    ("inner-minus", b"1 2 1-2\n", 2, 1, False, -1),
    ("bare-exponent", b"1 2 1e\n", 2, 1, False, -1),
    ("bare-dot", b"1 2 .\n", 2, 1, False, -1),
    ("plus-sign", b"1 2 +1\n", 2, 1, False, -1),
    ("nan", b"1 2 nan\n", 2, 1, False, -1),
    ("signed-index", b"-1 2 1.0\n", 2, 1, False, -1),
    ("fractional-index", b"1.0 2 1.0\n", 2, 1, False, -1),
    ("19-digit-index", b"1234567890123456789 1 1\n", 2, 1, False, -1),
    ("fraction-in-integer-file", b"1 2 1.5\n", 2, 1, True, -1),
    ("comment-line", b"1 2 3\n% note\n4 5 6\n", 2, 1, False, -1),
    ("trailing-comment", b"1 2 3 % note\n", 2, 1, False, -1),
    ("blank-line", b"1 2 3\n\n4 5 6\n", 2, 1, False, -1),
    ("lone-carriage-return", b"1 2 3\r4 5 6\n", 2, 1, False, -1),
    ("vertical-tab", b"1\x0b2 3\n", 2, 1, False, -1),
    ("comma", b"1,2,3\n", 2, 1, False, -1),
]


@pytest.mark.parametrize("piece, nindex, nvalue, integer, expected", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_plain_lines(piece, nindex, nvalue, integer, expected):
    """Each piece gives its line count, or -1 if a line is not plain. Not collective."""
    got = plain_lines(np.frombuffer(piece, dtype=np.uint8), nindex, nvalue, integer)
    assert got == expected, (piece, got)
