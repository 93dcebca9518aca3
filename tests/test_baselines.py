"""The baselines on the host: NVIDIA's published figures, the best BF16 row and FP8 peer at each shape, the
calibration's configuration, the kernel-alone summary, grouped heads in the peers' checks, and another cuDNN for
the cuDNN rows through a real child process."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from fsbench.harness.cli import main
from fsbench.kernels.tools import bench, calibrate, cudnn_env, kernel_time, peers, published


def test_each_published_figure_is_its_flops_over_nvidias_forward_time():
    for (kind, keys), tflops in published.FORWARD_TFLOPS.items():
        flops = 4 * 1 * published.HEADS * keys * keys * published.HEAD_DIM
        assert flops / published.FORWARD_MS[(kind, keys)] / 1e9 == pytest.approx(tflops, rel=0.01)
    assert all(published.FORWARD_TFLOPS[("fp8", s)] > published.FORWARD_TFLOPS[("bf16", s)]
               for s in published.SEQ_LENS)


def test_a_published_figure_is_given_only_for_the_gpu_nvidia_measured():
    assert published.figure("fp8", 32768, "NVIDIA H200") == published.FORWARD_TFLOPS[("fp8", 32768)]
    assert published.figure("fp8", 32768, "NVIDIA H100 80GB HBM3") is None
    assert published.figure("bf16", 75600, "NVIDIA H200") is None
    assert "cudnn-frontend" in published.SOURCE["repository"] and len(published.SOURCE["commit"]) == 40


def test_calibration_runs_nvidias_configuration_with_cudnn_in_its_training_forward():
    assert calibrate.SHAPES == tuple((1, 64, s, 128) for s in (4096, 16384, 32768))
    by_name = {row.name: row for row in calibrate.rows()}
    assert set(by_name) == set(calibrate.ROWS) and set(calibrate.ROWS) <= {r.name for r in bench.rows()}
    for name in ("cudnn-bf16", "cudnn-fp8"):
        assert by_name[name].fn.keywords == {"stats": True}
    assert all(row.gqa for row in by_name.values())
    assert [calibrate.precision(n) for n in ("fa3-bf16", "cudnn-fp8@9.27.0", "gluon-fused-mxfp8")] == \
        ["bf16", "fp8", None]


def _row(name: str, tflops: float, shape=(1, 24, 32768, 128), kernel: float | None = None) -> dict:
    return {"row": name, "shape": list(shape), "tflops": tflops, "median_ms": 1.0, "rel_err_pct": 1.0,
            "cosine": 0.99, **({"kernel_tflops": kernel, "kernel_ms": 0.9} if kernel else {})}


def test_best_bf16_and_best_fp8_peer_are_the_fastest_of_their_rows_at_each_shape():
    other = (1, 40, 75600, 128)
    results = bench.add_ratios([
        _row("sdpa-cudnn-bf16", 600.0, kernel=640.0), _row("fa3-bf16", 650.0, kernel=660.0),
        _row("cudnn-fp8", 800.0, kernel=980.0), _row("fa3-fp8", 840.0, kernel=900.0),
        _row("cudnn-fp8@9.27.0", 820.0, kernel=1010.0), _row("gluon-fused-mxfp8", 900.0),
        _row("sdpa-flash-bf16", 700.0, shape=other), _row("fa3-bf16", 690.0, shape=other)])
    best = {tuple(b["shape"]): b for b in bench.best_rows(results)}
    here = best[(1, 24, 32768, 128)]
    assert here["best_bf16"] == {"row": "fa3-bf16", "tflops": 650.0}
    assert here["best_fp8_peer"] == {"row": "fa3-fp8", "tflops": 840.0}  # the fused kernel is no peer
    assert here["best_fp8_peer_kernel"] == {"row": "cudnn-fp8@9.27.0", "tflops": 1010.0}
    assert best[other]["best_bf16"]["row"] == "sdpa-flash-bf16" and best[other]["best_fp8_peer"] is None
    fused = next(r for r in results if r["row"] == "gluon-fused-mxfp8")
    assert fused["best_bf16"] == "fa3-bf16" and fused["x_best_bf16"] == pytest.approx(900 / 650)
    assert fused["x_best_fp8_peer"] == pytest.approx(900 / 840)
    text = bench.format_best(results)
    assert "best BF16: fa3-bf16 650.0; best FP8 peer: fa3-fp8 840.0" in text
    assert "kernel alone: fa3-bf16 660.0; cudnn-fp8@9.27.0 1010.0" in text


def test_the_tables_grow_kernel_and_nvidia_columns_only_where_measured():
    plain = [_row("sdpa-cudnn-bf16", 600.0)]
    assert "kernel" not in bench.format_table(bench.add_ratios(plain))
    calibrated = bench.add_ratios([{**_row("cudnn-fp8", 800.0, kernel=990.0), "published_tflops": 1062.0,
                                    "x_published": 990.0 / 1062.0}])
    table, markdown = bench.format_table(calibrated), bench.format_markdown(calibrated)
    listed = bench.best_markdown(calibrated)
    assert "kernel TFLOP/s" in table and "x NVIDIA" in table and " 990.0 " in table and " 0.93" in table
    header = markdown.splitlines()[0]
    assert header.count("|") == markdown.splitlines()[1].count("|") and "NVIDIA TFLOP/s" in header
    assert "- (1, 24, 32768, 128) best BF16: none measured; best FP8 peer: cudnn-fp8 800.0" in listed


def test_the_kernel_alone_is_the_kernel_with_the_most_device_time():
    durations = {"cast": [40.0, 40.0, 40.0], "attention": [900.0, 1000.0, 1100.0], "amax": [20.0] * 3}
    found = kernel_time.summarize(durations, calls=3, flops=10**12)
    assert found["kernel"] == "attention" and found["kernel_ms"] == pytest.approx(1.0)
    assert found["kernel_tflops"] == pytest.approx(1000.0) and found["kernels_per_call"] == 3
    assert found["busy_ms_per_call"] == pytest.approx(1.06)
    assert kernel_time.summarize({}, calls=3, flops=1) == {}


@pytest.mark.parametrize("kv_heads, grouped, ok", [(8, False, True), (2, True, True), (2, False, False),
                                                   (3, True, False)])
def test_the_flashattention_rows_take_grouped_heads_that_divide_the_query_heads(kv_heads, grouped, ok):
    q, k = torch.zeros(1, 8, 16, 128, dtype=torch.bfloat16), torch.zeros(1, kv_heads, 16, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA device" if ok else "one shape"):
        peers._bhsd(q, k, k, "fa3-bf16", grouped=grouped)


def test_another_cudnn_is_the_one_a_child_process_loads(tmp_path):
    """A folder laid out as an unpacked cuDNN wheel (here a copy of the installed wheel's loader library, links to
    its sub-libraries and its dist-info) is where the child's torch takes libcudnn from, and its version is the
    wheel's."""
    import nvidia.cudnn

    installed = Path(list(nvidia.cudnn.__path__)[0])
    site = tmp_path / "cudnn"
    (site / cudnn_env.LIB).mkdir(parents=True)
    shutil.copy2(installed / "lib" / "libcudnn.so.9", site / cudnn_env.LIB / "libcudnn.so.9")
    for sub in (installed / "lib").glob("libcudnn_*.so.9"):
        (site / cudnn_env.LIB / sub.name).symlink_to(sub)
    for info in installed.parent.parent.glob("nvidia_cudnn_cu*.dist-info"):
        shutil.copytree(info, site / info.name)
    probe = ("import torch; v = torch.backends.cudnn.version(); "
             "print(v, [l.split()[-1] for l in open('/proc/self/maps') if 'libcudnn.so.9' in l][0])")
    done = subprocess.run([sys.executable, "-c", probe], env=cudnn_env.environment(site, dict(os.environ)),
                          capture_output=True, text=True, timeout=300)
    version, path = done.stdout.split()
    assert Path(path).resolve() == (site / cudnn_env.LIB / "libcudnn.so.9").resolve(), done.stderr
    assert cudnn_env.dotted(int(version)) == cudnn_env.wheel_version(site)


def test_cudnn_versions_read_as_cudnns_own_numbering():
    assert [cudnn_env.dotted(v) for v in (91901, 92700, None)] == ["9.19.1", "9.27.0", None]


def test_bench_refuses_a_cudnn_site_without_a_cudnn_wheel_before_any_gpu_work(tmp_path):
    result = CliRunner().invoke(main, ["kernels", "bench", "--cudnn-site", str(tmp_path)])
    assert result.exit_code == 2 and "holds no unpacked cuDNN 9 wheel" in result.output


@pytest.mark.parametrize("args, said", [(["--calibrate", "--shape", "1,64,4096,128"], "runs its own shapes"),
                                        (["--calibrate", "--sweep"], "pick one")])
def test_calibrate_refuses_shapes_of_its_own_and_the_sweep(args, said):
    result = CliRunner().invoke(main, ["kernels", "bench", *args])
    assert result.exit_code == 2 and said in result.output

