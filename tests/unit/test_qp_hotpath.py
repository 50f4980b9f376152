"""Helpers of the QP's hot paths that must be exact stand-ins for what they replace."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.transport.cc import AckSample, new_ack_sample
from mrcnic.transport.ev import EvConfig, EvTable


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 300), seed=st.integers(0, 2**32))
def test_ev_shuffle_is_random_shuffle(n, seed):
    """The bag's shuffle draws the same numbers and gives the same order as
    random.Random.shuffle (the spraying order, hence every simulation, is unchanged)."""
    table = EvTable(4, 2, EvConfig(ev_count=8), seed=1)
    ours = random.Random(seed)
    table._getrandbits = ours.getrandbits
    x = list(range(n))
    table._shuffle(x)
    ref = random.Random(seed)
    y = list(range(n))
    ref.shuffle(y)
    assert x == y and ours.getstate() == ref.getstate()


def test_fast_ack_sample_is_a_genuine_frozen_ack_sample():
    s = new_ack_sample(4096, 1e-3, True, 2.5, 17, 1, 3, 65536)
    assert type(s) is AckSample and s == AckSample(4096, 1e-3, True, 2.5, 17, 1, 3, 65536)
    assert hash(s) == hash(AckSample(4096, 1e-3, True, 2.5, 17, 1, 3, 65536))
    # (the first four alone: the engines' samples before the EV and bytes in flight)
    assert new_ack_sample(4096, 1e-3, True, 2.5, -1, -1, -1, -1) == AckSample(4096, 1e-3, True, 2.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.acked_bytes = 1  # type: ignore[misc]
