"""harness.measure.clocks: nvidia-smi's samples parsed, gathered in the background and summarised per window (the
sampler runs against a stand-in `nvidia-smi` on PATH here; the H200 runs give the real one)."""
from __future__ import annotations

import os
import time

import pytest

from fsbench.harness.measure import clocks as gpu_clock


def test_a_sample_line_gives_clock_power_and_the_active_reasons():
    sample = gpu_clock.parse_sample("2026/12/03 08:21:05.250, 1770, 690.12, 64, Active, Not Active, Not Active\n")
    assert sample["clock_mhz"] == 1770.0 and sample["power_w"] == 690.12 and sample["temp_c"] == 64.0
    assert sample["power_cap"] and not sample["thermal"]
    later = gpu_clock.parse_sample("2026/12/03 08:21:05.300, 1755, 689.0, 64, Not Active, Active, Not Active")
    assert later["t"] - sample["t"] == pytest.approx(0.05) and later["thermal"] and not later["power_cap"]


@pytest.mark.parametrize("line", ["timestamp, clocks.sm [MHz], power.draw [W]",
                                  "2026/12/03 08:21:05.250, 1770, [N/A], 64, Active, Not Active, Not Active",
                                  "2026/12/03 08:21:05.250, 17"])
def test_headers_partial_lines_and_unsupported_fields_are_not_samples(line):
    assert gpu_clock.parse_sample(line) is None


def test_summary_takes_only_the_samples_inside_the_window():
    samples = [{"t": t, "clock_mhz": c, "power_w": p, "temp_c": 60.0 + t, "power_cap": cap, "thermal": False}
               for t, c, p, cap in ((0.0, 1980, 300.0, False), (1.0, 1770, 690.0, True), (2.0, 1740, 691.0, True),
                                    (3.0, 1800, 680.0, False), (9.0, 1980, 100.0, False))]
    summary = gpu_clock.summarize(samples, 1.0, 3.0)
    assert summary == {"samples": 3, "clock_mhz": 1770, "power_w": 690.0, "temp_c": 63.0,
                       "power_cap_share": pytest.approx(2 / 3), "thermal_share": 0.0}
    assert gpu_clock.summarize(samples, 4.0, 8.0) is None


def test_samples_fall_in_a_span_only_between_its_ends_inclusive():
    samples = [{"t": t} for t in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 9.0)]
    assert gpu_clock.in_spans(samples, [(3.0, 4.0), (1.0, 2.0)]) == [False, True, True, True, False, True, False]
    assert gpu_clock.in_spans(samples, []) == [False] * len(samples)


def test_sampling_runs_nvidia_smi_in_the_background_and_keeps_its_samples(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"  # prints one sample every 20 ms with the current time, as the real one does
    fake.write_text('#!/bin/sh\nwhile true; do date "+%Y/%m/%d %H:%M:%S.%N, 1755, 689.5, 61, Active, Not Active, '
                    'Not Active" | sed "s/\\.\\([0-9][0-9][0-9]\\)[0-9]*,/.\\1,/"; sleep 0.02; done\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    start = time.time()
    with gpu_clock.sampling(20) as samples:
        time.sleep(0.5)
        assert samples == []  # filled when the block ends
    end = time.time()
    assert len(samples) >= 5 and all(start - 1 <= s["t"] <= end + 1 for s in samples)
    summary = gpu_clock.summarize(samples, start - 1, end + 1)
    assert summary["clock_mhz"] == 1755.0 and summary["power_cap_share"] == 1.0


# A host of two GPUs: GPU 0 busy at its power cap, GPU 1 idle. Like nvidia-smi, `--id N` prints GPU N alone and
# no --id prints a line for each GPU.
TWO_GPUS = """#!/bin/sh
ids="0 1"
while [ $# -gt 0 ]; do [ "$1" = --id ] && ids=$2; shift; done
while true; do
  for i in $ids; do
    if [ "$i" = 0 ]; then v="1755, 689.5, 61, Active"; else v="345, 70.1, 30, Not Active"; fi
    date "+%Y/%m/%d %H:%M:%S.%N, $v, Not Active, Not Active" | sed "s/\\.\\([0-9][0-9][0-9]\\)[0-9]*,/.\\1,/"
  done
  sleep 0.02
done
"""


@pytest.mark.parametrize(("device", "visible", "clocks"), [(1, "1,0", {1755.0}), (0, "1,0", {345.0}),
                                                             (1, "0,1", {345.0}), (None, None, {1755.0, 345.0})])
def test_sampling_reads_the_gpu_of_the_device_by_its_host_wide_number(tmp_path, monkeypatch, device, visible,
                                                                       clocks):
    import torch

    if device is None and torch.cuda.is_available():
        pytest.skip("samples every GPU only in a process that sees none")
    fake = tmp_path / "nvidia-smi"
    fake.write_text(TWO_GPUS)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with gpu_clock.sampling(20, None if device is None else torch.device("cuda", device)) as samples:
        time.sleep(0.4)
    assert len(samples) >= 5 and {s["clock_mhz"] for s in samples} == clocks


def test_a_cpu_device_has_no_gpu_number():
    import torch

    assert gpu_clock.nvml_index(torch.device("cpu")) is None


def test_without_nvidia_smi_there_are_no_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with gpu_clock.sampling() as samples:
        pass
    assert samples == []


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU and its nvidia-smi")
def test_back_to_back_gives_the_throughput_with_the_clock_it_ran_at():
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    held = gpu_clock.back_to_back(torch.matmul, (a, a), 2.0, 2 * 8192 ** 3)
    assert held["calls"] > 10 and 50 < held["tflops"] < 2000
    assert 500 < held["clock_mhz"] < 2500 and held["power_w"] > 50
