"""Schedules map (step, layer) to a format; bad schedules fail with a message naming the problem."""
from __future__ import annotations

from pathlib import Path

import pytest

from fsbench.errors import FsbenchError
from fsbench.harness.precision.schedule import builtin_names, load, parse_spec

ROOT = Path(__file__).resolve().parent.parent


def test_builtins_are_the_five_documented_schedules():
    assert builtin_names() == ["bf16", "hybrid", "mxfp4", "mxfp6", "mxfp8"]
    for fmt in ("bf16", "mxfp8", "mxfp6", "mxfp4"):
        assert set(load(fmt).resolve(20, 40).by_step()) == {fmt}


def test_hybrid_is_mxfp6_for_first_and_last_three_of_twenty_steps():
    table = load("hybrid").resolve(20, 40).table
    assert [row[0] for row in table] == ["mxfp6"] * 3 + ["mxfp4"] * 14 + ["mxfp6"] * 3
    assert all(len(set(row)) == 1 for row in table)


def test_hybrid_scales_with_step_count():
    assert load("hybrid").resolve(4, 2).by_step() == ["mxfp6", "mxfp4", "mxfp4", "mxfp6"]
    assert load("hybrid").resolve(40, 2).by_step() == ["mxfp6"] * 6 + ["mxfp4"] * 28 + ["mxfp6"] * 6


def test_spec_string_with_explicit_steps_and_catch_all():
    by_step = load("mxfp6:0-2,17-19;mxfp4:*").resolve(20, 3).by_step()
    assert by_step[:3] == ["mxfp6"] * 3 and by_step[3:17] == ["mxfp4"] * 14 and by_step[17:] == ["mxfp6"] * 3


def test_layer_ranges_pick_formats_per_layer_and_specific_rules_win():
    resolved = load("bf16@0-1:*;mxfp8:*;mxfp4@3:2").resolve(3, 4)
    assert resolved.table[0] == ("bf16", "bf16", "mxfp8", "mxfp8")
    assert resolved.table[2] == ("bf16", "bf16", "mxfp8", "mxfp4")
    assert resolved.fmt(1, 3) == "mxfp8"


def test_spec_round_trips_through_its_canonical_string():
    schedule = parse_spec(" mxfp6 : first15% , last15% ; mxfp4:* ")
    assert schedule.spec == "mxfp6:first15%,last15%;mxfp4:*"
    assert parse_spec(schedule.spec).resolve(20, 2) == schedule.resolve(20, 2)


@pytest.mark.parametrize("spec, message", [
    ("mxfp5:*", "unknown format 'mxfp5'"),
    ("mxfp6", "has no ':'"),
    ("mxfp6:0-x", "bad steps term '0-x'"),
    ("mxfp6@a:*", "bad layers term 'a'"),
    ("mxfp6:5-2;mxfp4:*", "range 5-2 runs backwards"),
    ("mxfp6:0-20;mxfp4:*", "step 20 is out of range; this run has 20 steps (0-19)"),
    ("mxfp6@40:*", "layer 40 is out of range"),
    ("mxfp6:0-2;mxfp4:2-19", "rules 'mxfp6:0-2' and 'mxfp4:2-19' both set step 2"),
    ("mxfp6:0-2;mxfp4:5-19", "no format for step(s) 3-4"),
    ("mxfp6:*;mxfp4:*", "both set step 0"),
    ("", "empty schedule spec"),
])
def test_invalid_specs_say_what_is_wrong(spec, message):
    with pytest.raises(FsbenchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(spec).resolve(20, 40)


def test_a_format_the_kernels_gain_is_a_format_schedules_accept(monkeypatch):
    from fsbench.kernels import constants

    with pytest.raises(FsbenchError, match="unknown format 'nvfp4'"):
        parse_spec("nvfp4:first2;mxfp4:*")
    monkeypatch.setattr(constants, "FORMATS", (*constants.FORMATS, "nvfp4"))
    resolved = parse_spec("nvfp4:first2;mxfp4:*").resolve(4, 2)
    assert resolved.by_step() == ["nvfp4", "nvfp4", "mxfp4", "mxfp4"]
    assert resolved.formats == ("mxfp4", "nvfp4")


def test_unknown_name_lists_the_choices():
    with pytest.raises(FsbenchError, match="unknown schedule 'fp8'.*bf16, hybrid, mxfp4, mxfp6, mxfp8"):
        load("fp8")


def test_toml_file_schedule(tmp_path):
    path = tmp_path / "edges.toml"
    path.write_text('description = "bf16 edges"\n[[rule]]\nformat = "bf16"\nsteps = "first1,last1"\n'
                    '[[rule]]\nformat = "mxfp8"\nsteps = "*"\nlayers = "*"\n')
    schedule = load(str(path))
    assert schedule.name == "edges" and schedule.description == "bf16 edges"
    assert schedule.resolve(4, 2).by_step() == ["bf16", "mxfp8", "mxfp8", "bf16"]
    path.write_text('[[rule]]\nformat = "bf16"\n')
    with pytest.raises(FsbenchError, match="needs keys format and steps"):
        load(str(path))
    with pytest.raises(FsbenchError, match="not found"):
        load(str(tmp_path / "missing.toml"))


def test_a_schedule_and_a_preset_written_with_a_byte_order_mark_read_as_without(tmp_path):
    from fsbench.harness.run.presets import build_settings

    text = '[[rule]]\nformat = "mxfp8"\nsteps = "*"\n'
    (tmp_path / "plain.toml").write_text(text, encoding="utf-8")
    (tmp_path / "marked.toml").write_text(text, encoding="utf-8-sig")  # what Windows editors save
    assert load(str(tmp_path / "marked.toml")).resolve(3, 2).by_step() == \
        load(str(tmp_path / "plain.toml")).resolve(3, 2).by_step() == ["mxfp8"] * 3
    preset = (ROOT / "scenarios" / "mlperf.toml").read_text(encoding="utf-8")
    (tmp_path / "mlperf.toml").write_text(preset, encoding="utf-8-sig")  # named by its file: the same name
    assert build_settings(str(tmp_path / "mlperf.toml"), "tiny") == build_settings("mlperf", "tiny")
