"""`fsbench run --bf16-impl`: the kernel of the bf16 layers' self-attention, checked before the model loads,
applied by the router and recorded in the manifest, on the tiny model."""
from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from fsbench.errors import FsbenchError
from fsbench.harness.cli import main
from fsbench.harness.model import options as speed
from fsbench.kernels import registry
from fsbench.rundir import load_manifest

SMALL = ["--count", "1", "--time", "0", "--height", "32", "--width", "32", "--frames", "5", "--steps", "2"]


def test_the_bf16_choices_are_the_registrys_bf16_kernels_and_auto_stays_sdpa():
    assert registry.BF16_CHOICES == (registry.AUTO,) + tuple(i.name for i in registry.TABLE if "bf16" in i.formats)
    assert registry.FA3 in registry.BF16_CHOICES and registry.FA3 not in registry.RUN_CHOICES
    assert registry.resolve_impl("bf16", registry.AUTO, torch.device("cpu"), 128) == registry.SDPA
    assert speed.SpeedOptions(bf16_impl=registry.FA3).slug == "-bf16fa3"
    with pytest.raises(FsbenchError, match="--bf16-impl"):
        speed.SpeedOptions(bf16_impl="gluon")  # an MX kernel computes no bf16


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no sm_90 GPU")
def test_a_bf16_kernel_that_cannot_run_here_is_refused_in_one_line_before_the_model_loads(tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--schedule", "bf16", "--bf16-impl", registry.FA3, "--out", str(run),
                                       *SMALL])
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("fsbench: error: --bf16-impl fa3: impl='fa3' runs on a CUDA")
    assert not (run / "manifest.json").exists()


def test_the_bf16_layers_run_the_kernel_named_and_the_manifest_says_so(tmp_path, one_thread):
    runs = {}
    for impl in (registry.AUTO, registry.EMULATE):
        runs[impl] = tmp_path / impl
        result = CliRunner().invoke(main, ["run", "--schedule", "mxfp8:0;bf16:*", "--bf16-impl", impl,
                                           "--out", str(runs[impl]), *SMALL], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    for impl, kernel in ((registry.AUTO, registry.SDPA), (registry.EMULATE, registry.EMULATE)):
        summary = load_manifest(runs[impl])["results"]["SingleStream"]["performance"]
        assert summary["speed"]["bf16_impl"] == impl
        assert summary["attention_kernels"]["bf16"] == kernel
        assert summary["attention_kernels"]["mxfp8"] == registry.EMULATE  # the MX layers keep their own kernel


def test_a_video_made_with_another_bf16_kernel_is_never_reused_for_sdpas_and_old_digests_stay():
    from fsbench.harness.run import made_with as artifacts

    args = ("tiny", {"steps": 2}, "0" * 64, "bf16:*", registry.AUTO)
    before = artifacts.made_with(*args, {"compile": False, "gemm": "bf16", "vae": "fp32"})  # a run without the option
    sdpa = artifacts.made_with(*args, {"compile": False, "gemm": "bf16", "vae": "fp32", "bf16_impl": registry.AUTO})
    fa3 = artifacts.made_with(*args, {"compile": False, "gemm": "bf16", "vae": "fp32", "bf16_impl": registry.FA3})
    assert before == sdpa != fa3
