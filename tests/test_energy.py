"""Energy per video (`harness.measure.energy`): NVML's counter, the nvidia-smi power fallback, and their arithmetic."""
from __future__ import annotations

import shutil

import pytest
import torch

from fsbench.harness.measure import clocks, energy
from fsbench.harness.measure.profile import split_joules
from fsbench.harness.measure.profile_report import energy_summary


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU driver is present")
def test_nvml_without_a_driver_says_it_is_unavailable_instead_of_crashing():
    pytest.importorskip("pynvml")
    with pytest.raises(energy.EnergyUnavailable, match=r"^NVML unavailable: "):
        energy.nvml_handle(0)


def test_a_cpu_meter_has_no_source_and_says_why():
    meter = energy.Meter(torch.device("cpu"))
    with meter.window() as window:
        start, end = window.mark(), window.mark()
    assert meter.describe() == {"source": None, "reason": "no GPU energy on a cpu device"}
    assert window.joules(start, end) is None


def test_counter_readings_give_the_joules_between_them():
    # millijoules since driver load, read once a second at 690 W, then 350 W for two seconds
    readings = [9_876_543_210, 9_876_543_210 + 690_000, 9_876_543_210 + 1_380_000,
                9_876_543_210 + 1_730_000, 9_876_543_210 + 2_080_000]
    steps = [energy.counter_joules(a, b) for a, b in zip(readings, readings[1:])]
    assert steps == [690.0, 690.0, 350.0, 350.0]
    assert energy.counter_joules(readings[0], readings[-1]) == 2080.0
    with pytest.raises(ValueError, match="went back"):
        energy.counter_joules(readings[1], readings[0])


def _samples(watts: list[float], start: float = 1_700_000_000.0, every_s: float = 0.5) -> list[dict]:
    """gpu_clock samples parsed from nvidia-smi CSV lines, one every `every_s` from `start`."""
    import datetime as dt

    lines = [f"{dt.datetime.fromtimestamp(start + i * every_s):%Y/%m/%d %H:%M:%S.%f}, 1755, {w}, 60, Active, "
             "Not Active, Not Active" for i, w in enumerate(watts)]
    return [clocks.parse_sample(line) for line in lines]


def test_sampled_power_is_integrated_over_the_window():
    samples = _samples([600.0, 700.0, 700.0, 700.0, 700.0])  # t0 .. t0 + 2 s
    t0 = samples[0]["t"]
    assert energy.sampled_joules(samples, t0, t0 + 0.5) == pytest.approx(325.0)  # the ramp: mean 650 W
    assert energy.sampled_joules(samples, t0 + 0.5, t0 + 2.0) == pytest.approx(1050.0)
    assert energy.sampled_joules(samples, t0 + 2.0, t0 + 3.0) == pytest.approx(700.0)  # held past the last sample
    assert energy.sampled_joules([], t0, t0 + 1) is None
    window = energy.Window(torch.device("cpu"), energy.SAMPLED)
    window.samples = samples
    assert window.joules(t0, t0 + 2.0) == pytest.approx(1375.0)


def test_the_loop_joules_are_split_over_steps_and_attention_by_device_time():
    record = {"joules": 500.0, "denoise_joules": 400.0, "wall_s": 1.0, "steps": [
        {"fmt": "mxfp8", "total_s": 1.0, "self_attention_s": 0.5, "self_attention_calls": 4},
        {"fmt": "bf16", "total_s": 3.0, "self_attention_s": 2.0, "self_attention_calls": 4}]}
    split_joules(record)
    assert [r["joules"] for r in record["steps"]] == [100.0, 300.0]
    assert [r["self_attention_joules"] for r in record["steps"]] == [50.0, 200.0]
    summary = energy_summary([record], {"source": energy.NVML, "reason": None})
    assert summary["joules_per_video"] == 500.0 and summary["mean_power_w"] == 500.0
    assert summary["by_format"]["bf16"] == {"joules_per_step": 300.0, "joules_per_self_attention_call": 50.0}
