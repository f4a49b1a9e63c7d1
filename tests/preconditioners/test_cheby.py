"""The Chebyshev polynomial preconditioner: its options checked at the door,
with the same exception on every rank."""

import pytest

import preconditioners
from bad_inputs import check_bad_input, make_pc


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("cheby-degree-zero", ValueError, "degree",
     lambda e: preconditioners.make("cheby", e.A, degree=0)),
    ("cheby-bounds-reversed", ValueError, "lower < upper",
     lambda e: preconditioners.make("cheby", e.A, lower=2.0, upper=1.0)),
    ("cheby-ratio-below-one", ValueError, "ratio", make_pc("cheby", ratio=0.5)),
    ("cheby-steps-zero", ValueError, "steps", make_pc("cheby", steps=0)),
    ("cheby-safety-below-one", ValueError, "safety", make_pc("cheby", safety=0.5)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
