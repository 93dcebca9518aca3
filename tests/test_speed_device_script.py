"""scripts/device_speed.py (the H200 latency job) on the CPU with the tiny model, so its code path is known to
work before device time is spent, and its assembly of the parts into a total pinned by hand."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("device_speed")


@pytest.mark.slow
def test_measure_times_every_part_and_assemble_sums_them(script, tmp_path, one_thread):
    out = tmp_path / "h200"
    result = CliRunner().invoke(script.main, ["measure", "--out", str(out), "--model", "tiny", "--height", "32",
                                              "--width", "32", "--frames", "5", "--formats", "bf16,mxfp8",
                                              "--repeats", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads((out / script.JSON_NAME).read_text())
    assert data["impl"] == {"bf16": "sdpa", "mxfp8": "emulate"}
    assert data["skipped"] == ["bf16/mxfp8: kernels.attention would run the emulator",
                               "fp8/mxfp8: kernels.attention would run the emulator"]
    for gemm in ("bf16", "fp8"):
        row = data["forwards"][gemm]["bf16"]
        assert len(row["forward_s"]) == 2 and 0 < row["median_gemm_s"] < row["median_forward_s"]
        assert row["gpu_clock"] is None  # no nvidia-smi samples without a GPU
    assert data["fp8"]["linears_converted"] == 40 and 0 < data["fp8_layer_check"]["rel_err"] < 0.1
    assert 0 < data["forwards"]["fp8"]["bf16"]["vs_bf16_gemm_bf16_attention"]["rel_err"] < 0.1
    assert set(data["vae"]) == {"fp32", "fp32-channels-last", "bf16", "bf16-channels-last", "bf16-tiled"}
    assert data["encode"]["mp4_bytes"] > 0 and 0 <= data["loadgen"]["overhead_s"] < 0.1
    result = CliRunner().invoke(script.main, ["assemble", str(out), "--out", str(tmp_path / "table")])
    assert result.exit_code == 0, result.output
    (table,) = json.loads((tmp_path / "table" / "speed.json").read_text())
    assert [(r["gemm"], r["schedule"]) for r in table["rows"]] == [("bf16", "bf16"), ("fp8", "bf16")]
    assert table["missing_parts"] == [] and "| fp8 | bf16 |" in (tmp_path / "table" / "speed.md").read_text()


def test_attention_inputs_keeps_a_forwards_qkv_and_times_each_call_in_place_and_alone(script, tmp_path, one_thread):
    out = tmp_path / "inputs"
    result = CliRunner().invoke(script.main, ["attention-inputs", "--out", str(out), "--model", "tiny", "--height",
                                              "32", "--width", "32", "--frames", "5", "--layers", "1",
                                              "--repeats", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "attention_inputs.json").read_text())
    assert data["impl"] == "emulate" and data["shape_bshd"] == [1, 8, 2, 32]  # 2 latent frames x 2x2 patches, 2 heads
    assert [c["layer"] for c in data["calls"]] == [0, 1]  # one call per block of the tiny expert
    assert all(c["in_forward_ms"] > 0 and c["key_tiles"] == 1 for c in data["calls"])
    assert [r["inputs"] for r in data["rows"]] == [1, "randn"]
    kept, randn = data["rows"]
    assert kept["in_forward_ms"] == data["calls"][1]["in_forward_ms"] and "in_forward_ms" not in randn
    assert all(r["sdpa_bf16_ms"] > 0 and r["mxfp8_ms"] > 0 for r in data["rows"])
    assert data["in_forward_ms"]["sum"] == pytest.approx(sum(c["in_forward_ms"] for c in data["calls"]))


def test_total_is_text_plus_twenty_steps_plus_decode_encode_and_loadgen(script):
    forward = {f: {"median_forward_s": s, "max_forward_s": s + 1, "median_self_attention_s": s / 2}
               for f, s in (("bf16", 10.0), ("mxfp6", 6.0), ("mxfp4", 5.0))}
    data = {"forwards": {"bf16": forward}, "step_overhead_s": 0.01, "text_encode": {"positive_only_s": 0.1},
            "vae": {"fp32": {"decode_s": 6.0}, "bf16": {"decode_s": 4.0}},
            "encode": {"postprocess_s": 0.5, "video_encode_s": 2.0}, "loadgen": {"overhead_s": 0.001}}
    table = script.assemble_one(data, "test")
    rows = {r["schedule"]: r for r in table["rows"]}
    assert set(rows) == {"bf16", "mxfp6", "mxfp4", "hybrid"}  # mxfp8 was not measured
    fixed = 0.1 + 6.0 + 0.5 + 2.0 + 0.001  # BF16 GEMMs keep the fp32 VAE
    assert rows["bf16"]["total_median_s"] == pytest.approx(fixed + 20 * (2 * 10.0 + 0.01))
    assert rows["hybrid"]["total_max_s"] == pytest.approx(fixed + 6 * (2 * 7.0 + 0.01) + 14 * (2 * 6.0 + 0.01))
    assert rows["hybrid"]["self_attention_share_of_denoise"] == pytest.approx(
        (6 * 6.0 + 14 * 5.0) / (6 * (12.0 + 0.01) + 14 * (10.0 + 0.01)))
    assert rows["hybrid"]["speedup_median"] == pytest.approx(rows["bf16"]["total_median_s"]
                                                             / rows["hybrid"]["total_median_s"])


def test_assemble_merges_gemm_kinds_per_compile_setting_and_borrows_missing_parts(script, tmp_path):
    forward = {"median_forward_s": 10.0, "max_forward_s": 11.0, "median_self_attention_s": 5.0}
    eager = {"command": "eager", "compile": False, "forwards": {"bf16": {"bf16": forward}},
             "text_encode": {"positive_only_s": 0.1}, "vae": {"fp32": {"decode_s": 6.0}},
             "encode": {"postprocess_s": 0.5, "video_encode_s": 2.0}, "loadgen": {"overhead_s": 0.0},
             "step_overhead_s": 0.0}
    compiled = [{"command": f"compiled {g}", "compile": True, "forwards": {g: {"bf16": forward}}}
                for g in ("bf16", "fp8")]
    paths = []
    for i, data in enumerate([eager, *compiled]):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(data))
    result = CliRunner().invoke(script.main, ["assemble", *map(str, paths), "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    plain, merged = json.loads((tmp_path / "t" / "speed.json").read_text())
    assert (plain["compile"], merged["compile"]) == (False, True) and merged["commands"] == ["compiled bf16",
                                                                                             "compiled fp8"]
    assert {r["gemm"] for r in merged["rows"]} == {"bf16", "fp8"} and merged["missing_parts"] == []
    assert set(merged["borrowed_parts"]) == {"text_encode", "vae", "encode", "loadgen"}
    assert merged["rows"][0]["total_median_s"] == pytest.approx(plain["rows"][0]["total_median_s"])


def test_assemble_prints_its_error_against_real_twenty_step_queries(script, tmp_path):
    forward = {"median_forward_s": 10.0, "max_forward_s": 11.0, "median_self_attention_s": 5.0}
    parts = {"command": "compiled fp8", "compile": True, "forwards": {"fp8": {"bf16": forward}},
             "text_encode": {"positive_only_s": 0.1}, "vae": {"bf16": {"decode_s": 4.0}},
             "encode": {"postprocess_s": 0.5, "video_encode_s": 2.0}, "loadgen": {"overhead_s": 0.0},
             "step_overhead_s": 0.0}
    (tmp_path / "parts.json").write_text(json.dumps(parts))
    row = {"schedule": "bf16", "gemm": "fp8", "compile": True, "vae": "bf16", "joules": None, "commit": "abc1234"}
    queries = [dict(row, steps=2, query_s=50.0), dict(row, steps=20, query_s=400.0),
               dict(row, steps=20, query_s=380.0, compile=False)]
    (tmp_path / "queries.json").write_text(json.dumps(queries))
    result = CliRunner().invoke(script.main, ["assemble", str(tmp_path / "parts.json"), "--out", str(tmp_path / "t"),
                                              "--queries", str(tmp_path / "queries.json")])
    assert result.exit_code == 0, result.output
    (table,) = json.loads((tmp_path / "t" / "speed.json").read_text())
    (assembled,) = table["rows"]
    total = 0.1 + 4.0 + 0.5 + 2.0 + 20 * 2 * 10.0  # text + VAE + postprocess + mp4 + 20 steps of two forwards
    assert assembled["total_median_s"] == pytest.approx(total) and assembled["real_query_s"] == 400.0
    assert assembled["assembly_error_median"] == pytest.approx(total / 400.0 - 1)
    assert f"| fp8 | bf16 | 400.0 | abc1234 | {(20 * 2 * 11.0 + 6.6) / 400 - 1:+.1%} | {total / 400 - 1:+.1%} |" \
        in result.output
