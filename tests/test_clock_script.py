"""scripts/clock_under_load.py's reading of nvidia-smi samples (the device run needs a GPU; its parser does not)."""
from __future__ import annotations

import pytest
from conftest import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("clock_under_load")


def test_a_sample_line_gives_clock_power_and_the_active_reasons(script):
    sample = script._parse("2026/12/03 08:21:05.250, 1770, 690.12, 64, Active, Not Active, Not Active\n")
    assert sample["clock_mhz"] == 1770.0 and sample["power_w"] == 690.12 and sample["temp_c"] == 64.0
    assert sample["power_cap"] and not sample["thermal"]
    later = script._parse("2026/12/03 08:21:05.300, 1755, 689.0, 64, Not Active, Active, Not Active")
    assert later["t"] - sample["t"] == pytest.approx(0.05) and later["thermal"] and not later["power_cap"]


@pytest.mark.parametrize("line", ["timestamp, clocks.sm [MHz], power.draw [W]",
                                  "2026/12/03 08:21:05.250, 1770, [N/A], 64, Active, Not Active, Not Active",
                                  "2026/12/03 08:21:05.250, 17"])
def test_headers_partial_lines_and_unsupported_fields_are_not_samples(script, line):
    assert script._parse(line) is None
