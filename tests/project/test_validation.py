"""Bad input: one message template, pinned (STYLE.md, issue 2 item 4)."""

import pytest

from neuromanifold import Architecture, neuromanifold_dim, numerical_dim
from neuromanifold.experiments.figure3 import parse_int_set


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(widths=(3, 0, 3), keys=(2, 2), tokens=3), ValueError, r"`widths` must be a list of integers >= 1"),
    (dict(widths=(3, -2, 3), keys=(2, 2), tokens=3), ValueError, r"`widths` must be a list of integers >= 1"),
    (dict(widths=(3, 2.5, 3), keys=(2, 2), tokens=3), ValueError, r"`widths` must be a list of integers"),
    (dict(widths=(3,), keys=(), tokens=3), ValueError, r"`widths` must be a list of at least 2 integers"),
    (dict(widths=(3, 3, 3), keys=(2,), tokens=3), ValueError, r"`keys` must be one key width per layer \(2 "),
    (dict(widths=(3, 3), keys=(0,), tokens=3), ValueError, r"`keys` must be a list of integers >= 1"),
    (dict(widths=(3, 3), keys=(2,), tokens=0), ValueError, r"`tokens` must be an integer >= 1; got 0"),
    (dict(widths=(3, 3), keys=(2,), tokens=3, attention="relu"), ValueError,
     r"`attention` must be one of 'lightning', 'softmax'; got 'relu'"),
    (dict(widths=(3, 3), keys=(2,), tokens=3, attention="softmax", temperature=0), ValueError,
     r"`temperature` must be a positive finite number"),
    (dict(widths="333", keys=(2,), tokens=3), TypeError, r"`widths` must be a sequence of integers"),
])
def test_architecture_errors(kwargs, error, match):
    """Each invalid architecture argument gets the template message naming it."""
    with pytest.raises(error, match=match):
        Architecture(**kwargs)


def test_too_few_samples_rejected():
    """A fixed N with N t d_l < n_params cannot reach the parameter count: clear error."""
    arch = Architecture((3, 3, 3), (2, 2), 3)
    with pytest.raises(ValueError, match=r"`samples` must be at least 5 .* got 2\. Pass --samples 5"):
        numerical_dim(arch, samples=2)


def test_exact_method_rejected_for_softmax_certified_valid():
    """Softmax networks are not polynomial: exact (a rank over F_p) is refused; certified (ball
    arithmetic, docs/certified_softmax.md) is valid."""
    arch = Architecture((3, 3), (2,), 3, "softmax")
    with pytest.raises(ValueError, match="Softmax networks are not polynomial"):
        neuromanifold_dim(arch, method="exact")
    assert neuromanifold_dim(arch, method="certified").status == "certified"


def test_unknown_method_and_device():
    """Unknown method or device names are rejected with the allowed values."""
    arch = Architecture((3, 3), (2,), 3)
    with pytest.raises(ValueError, match=r"`method` must be one of 'auto', 'numerical'"):
        neuromanifold_dim(arch, method="guess")
    with pytest.raises(ValueError, match=r"`device` must be one of 'cpu', 'cuda', 'auto'"):
        numerical_dim(arch, device="tpu")


@pytest.mark.parametrize("text,values", [("3-6", [3, 4, 5, 6]), ("7,3,5", [3, 5, 7]), (" 4 - 4 ", [4])])
def test_parse_deltas(text, values):
    """--deltas accepts a range a-b or a list a,b,c."""
    assert parse_int_set("deltas", text) == values


@pytest.mark.parametrize("text", ["10-3", "a-b", "3,,4", "0-4", "", "3;4"])
def test_parse_deltas_rejects(text):
    """Malformed --deltas gets the template message."""
    with pytest.raises(ValueError, match=r"`deltas` must be"):
        parse_int_set("deltas", text)
