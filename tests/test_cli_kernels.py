"""`fsbench kernels proxy-table` and `fsbench kernels ablation` through the real CLI."""
from __future__ import annotations

import json

from click.testing import CliRunner

from harness.cli import main


def test_proxy_table_prints_the_bf16_row_of_table_8():
    result = CliRunner().invoke(main, ["kernels", "proxy-table"])
    assert result.exit_code == 0
    bf16 = next(line for line in result.output.splitlines() if line.startswith("U16 / BF16"))
    assert bf16.split()[-4:] == ["-4.199", "2.242", "1.777", "0.162"]


def test_ablation_json_has_every_row_and_format_and_is_saved(tmp_path):
    out = tmp_path / "ablation.json"
    result = CliRunner().invoke(main, ["kernels", "ablation", "--shape", "1,1,200,64", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert [r["components"] for r in saved["rows"]][0] == "conventional softmax" and len(saved["rows"]) == 6
    bf16_ref = saved["rows"][0]["bf16"]
    assert bf16_ref["err_pct"] == 0 and bf16_ref["cos"] > 0.999999
    mxfp4 = saved["rows"][3]["mxfp4"]["err_pct"]
    assert mxfp4 > saved["rows"][3]["mxfp8"]["err_pct"] > saved["rows"][3]["bf16"]["err_pct"] > 0


def test_ablation_bad_shape_is_a_usage_error():
    result = CliRunner().invoke(main, ["kernels", "ablation", "--shape", "1,2,3"])
    assert result.exit_code == 2 and "B,H,S,D" in result.output
    result = CliRunner().invoke(main, ["kernels", "ablation", "--shape", "1,1,64,48"])
    assert result.exit_code == 2 and "multiple of 32" in result.output
