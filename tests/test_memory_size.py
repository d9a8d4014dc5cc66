"""Memory in the refusals reads as a figure a person can act on: MiB where GiB would round to 0."""

from __future__ import annotations

import pytest

from octlm.report import memory_size


@pytest.mark.parametrize(
    "n_bytes, digits, text",
    [
        (2**20, 0, "1 MiB"),
        (0.4 * 2**30, 0, "410 MiB"),  # 0.4 GiB would print as "0 GiB"
        (0.6 * 2**30, 0, "1 GiB"),
        (64 * 2**30, 0, "64 GiB"),
        (2.7 * 2**20, 1, "2.7 MiB"),
        (0.04 * 2**30, 1, "41.0 MiB"),
        (1536 * 2**30, 0, "1,536 GiB"),
    ],
)
def test_memory_reads_in_the_unit_that_does_not_round_to_zero(n_bytes, digits, text):
    assert memory_size(n_bytes, digits) == text
