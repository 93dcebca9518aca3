"""scripts/device_e2e.py (the H200 latency job) on the CPU with the tiny model, so its code path is known to
work before device time is spent."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from click.testing import CliRunner

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_e2e.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("device_e2e", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_script_measures_formats_schedules_and_a_single_stream_query(tmp_path, one_thread):
    script = _load_script()
    out = tmp_path / "h200"
    result = CliRunner().invoke(script.main, ["--out", str(out), "--model", "tiny", "--height", "32", "--width", "32",
                                              "--frames", "5", "--schedules", "bf16,hybrid",
                                              "--query-schedules", "bf16"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "device_e2e.json").read_text())
    assert report["shape"]["tokens"] == 2 * 2 * 2 and report["skipped"] == []
    formats = report["formats"]
    assert set(formats) == {"bf16", "mxfp6", "mxfp4", "none"}
    for fmt in ("bf16", "mxfp6", "mxfp4"):
        assert formats[fmt]["attention_calls"] == 2 * 2  # two CFG passes x two layers
        assert 0 < formats[fmt]["attention_s"] < formats[fmt]["step_s"]
    assert formats["none"]["step_s"] > 0 and "attention_s" not in formats["none"]
    assert report["self_attention_share_by_noop"] < 1
    hybrid = report["schedules"]["hybrid"]
    expected = (6 * formats["mxfp6"]["step_s"] + 14 * formats["mxfp4"]["step_s"]) / 20  # 3 + 3 of 20 steps mxfp6
    assert abs(hybrid["mean_step_s"] - expected) < 1e-9
    (query,) = report["single_stream"]
    assert query["schedule"] == "bf16" and query["steps"] == 2 and query["latency_s"] > 0
    run = Path(query["run_dir"])
    assert (run / "cpu-tiny" / "wan-2.2-t2v-a14b" / "SingleStream" / "performance" / "run_1" /
            "mlperf_log_summary.txt").is_file()
    assert len(list((run / "videos").glob("*-0.mp4"))) == 1
