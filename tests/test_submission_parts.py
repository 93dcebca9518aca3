"""The parts of a submission that need no run: accuracy-log truncation as MLPerf's tool does it, and the
system description (every checker field, CPU-only as the string "0", TOML overrides)."""
from __future__ import annotations

import hashlib
import json
import re

import pytest

from fsbench.errors import FsbenchError
from fsbench.harness.mlperf import accuracy_log, system as system_desc
from fsbench.harness.mlperf.rules import SYSTEM_KEYS, SYSTEM_TRUTHY


def accuracy_json(entries: int) -> bytes:
    rows = [json.dumps({"seq_id": i, "qsl_idx": i, "data": (b"videos/p%d-0.mp4" % i).hex()}) for i in range(entries)]
    return ("[\n" + ",\n".join(rows) + "\n]\n").encode()


def test_a_large_log_keeps_4096_bytes_at_each_end_around_the_marker(tmp_path):
    full = accuracy_json(248)
    (tmp_path / "full.json").write_bytes(full)
    digest = accuracy_log.write_truncated(tmp_path / "full.json", tmp_path / "acc", "{'vbench_score': 70.0}")
    cut = (tmp_path / "acc" / "mlperf_log_accuracy.json").read_bytes()
    assert len(full) > accuracy_log.MAX_SIZE and len(cut) == 8199
    assert cut == full[:4096] + b"\n\n...\n\n" + full[-4096:]
    assert digest == hashlib.sha256(full).hexdigest()
    assert (tmp_path / "acc" / "accuracy.txt").read_text() == f"{{'vbench_score': 70.0}}\nhash={digest}\n"


def test_a_log_under_4096_bytes_is_kept_whole_and_still_hashed(tmp_path):
    small = accuracy_json(3)
    (tmp_path / "small.json").write_bytes(small)
    digest = accuracy_log.write_truncated(tmp_path / "small.json", tmp_path / "acc", "score\n")
    assert (tmp_path / "acc" / "mlperf_log_accuracy.json").read_bytes() == small
    text = (tmp_path / "acc" / "accuracy.txt").read_text()
    assert text == f"score\nhash={digest}\n" and accuracy_log.hash_value(text) == digest


def test_system_description_has_every_checker_field_filled():
    desc = system_desc.describe("open", "Org", "box")
    assert set(SYSTEM_KEYS) <= set(desc)
    empty = [k for k in SYSTEM_TRUTHY if not desc[k]]
    assert not empty
    assert desc["host_processor_model_name"] and desc["host_memory_capacity"].endswith("GB")
    assert desc["framework"].startswith("PyTorch ") and "mlcommons-loadgen" in desc["other_software_stack"]


def test_a_machine_without_gpu_writes_accelerators_per_node_as_the_string_zero(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    desc = system_desc.describe("open", "Org", "box")
    assert desc["accelerators_per_node"] == "0" and desc["accelerator_model_name"] == "N/A"


def test_a_toml_file_overrides_detected_fields(tmp_path):
    toml = tmp_path / "system.toml"
    toml.write_text('cooling = "liquid"\nhost_memory_configuration = "12x 64GB DDR5-4800"\nstatus = "preview"\n')
    desc = system_desc.describe("open", "Org", "box", toml_file=toml)
    assert (desc["cooling"], desc["host_memory_configuration"], desc["status"]) == (
        "liquid", "12x 64GB DDR5-4800", "preview")


@pytest.mark.parametrize("text, message", [("cooling = \n", "is not valid TOML"),
                                           ("[host]\ncooling = 'air'\n", "has tables (host)")])
def test_a_broken_toml_file_says_what_to_fix(tmp_path, text, message):
    toml = tmp_path / "system.toml"
    toml.write_text(text)
    with pytest.raises(FsbenchError, match=re.escape(message)):
        system_desc.describe("open", "Org", "box", toml_file=toml)
