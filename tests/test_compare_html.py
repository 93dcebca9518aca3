"""`fsbench compare --html` without a browser: the page's table, gaps, videos and self-containment."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from html.parser import HTMLParser
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest
from click.testing import CliRunner

from fsbench.eval.video_io import write_video
from fsbench.harness.cli import main

from eval_runs import constant_video, make_run

PROMPTS = ("a red fox running through fresh snow", "a paper boat drifting down a rainy street")


class _Page(HTMLParser):
    """One table's cells (text per row; the results table unless told) and every src/href the page refers to."""

    def __init__(self, table: str = "results"):
        super().__init__()
        self.rows, self.refs, self._in, self._table = [], [], None, table

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.refs += [attrs[k] for k in ("src", "href") if attrs.get(k)]
        if tag == "table" and attrs.get("id") == self._table:
            self._in = "table"
        elif self._in and tag == "tr":
            self.rows.append([])
        elif self._in and tag in ("td", "th") and self.rows:
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag == "table":
            self._in = None

    def handle_data(self, data):
        if self._in and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


@pytest.fixture
def runs_without_metrics(tmp_path):
    """BF16 and MXFP8 runs, 45x31 lossless RGB videos (what browsers cannot play), no eval, no performance."""
    videos = {"bf16": 100, "mxfp8": 130}
    return [make_run(tmp_path / s, s, {p: constant_video([v] * 5, 31, 45) for p in PROMPTS})
            for s, v in videos.items()]


def _resolve(cell: str, notes: dict[str, str]) -> str:
    """A cell with each note mark written out (the page numbers only the notes of the columns it shows)."""
    return re.sub(r"\[(\d+)\]", lambda m: f"[{notes[m.group(1)]}]", cell)


def _data(out) -> dict:
    """The JSON the page's script builds the video grid from."""
    text = (out / "index.html").read_text()
    return json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S).group(1))


def _compare(runs, tmp_path, *extra):
    out = tmp_path / "page"
    result = CliRunner().invoke(main, ["compare", *map(str, runs), "--out", str(tmp_path / "cmp"),
                                       "--frame", "2", "--html", str(out), *extra])
    assert result.exit_code == 0, result.output
    return out


def test_page_leaves_out_the_columns_no_run_has_and_footnotes_the_other_gaps(runs_without_metrics, tmp_path):
    """BF16 has a SingleStream latency, MXFP8 has nothing: latency and speedup stay as columns (MXFP8's cells n/a
    with a note), and every column no run has a value in is named, with why, below the table."""
    timed = make_run(tmp_path / "timed", "bf16", {p: constant_video([100] * 5, 31, 45) for p in PROMPTS},
                     results={"SingleStream": {"performance": {"latency_p90_ns": 2e9, "valid": True}}})
    out = _compare([timed, runs_without_metrics[1]], tmp_path)
    text = (out / "index.html").read_text()
    page = _Page()
    page.feed(text)
    header, *body = page.rows
    assert header == ["Schedule", "SingleStream p90 latency (s) ↓", "Speedup vs BF16 ↑"]
    notes = dict(re.findall(r"<li id='note-(\d+)' value='\d+'>([^<]+)</li>", text))
    mxfp8 = dict(zip(header, next(r for r in body if r[0] == "MXFP8")))
    for column in header[1:]:
        mark = re.fullmatch(r"n/a\[(\d+)\]", mxfp8[column])
        assert mark and notes[mark.group(1)], f"{column}: {mxfp8[column]!r}"
    assert "no SingleStream performance result" in notes[re.fullmatch(r"n/a\[(\d+)\]", mxfp8[header[1]]).group(1)]
    assert all(cell.strip() for row in body for cell in row)
    left_out = re.search(r"<div id='left-out'>(.*?)</div>", text).group(1)
    items = dict(item.split(": ", 1) for item in re.findall(r"<li>([^<]+)</li>", left_out))
    vbench = next(k for k in items if k.startswith("Subject consistency"))
    assert vbench.endswith("VBench overall") and len(vbench.split(", ")) == 7 and "VBench not run" in items[vbench]
    assert "not evaluated against BF16" in items["PSNR (dB), SSIM, LPIPS"]
    assert any(k.startswith("Energy per video") for k in items) and any(k.startswith("Offline") for k in items)
    assert "LPIPS: not computed for any run" in (out / "prompt_spread.svg").read_text()


def test_page_of_two_configurations_puts_them_side_by_side_as_compare_md_does(tmp_path):
    """Runs with BF16 and with FP8 GEMMs: the page's second table has compare.md's cells, row for row."""
    runs = []
    for schedule, gemm, latency in (("bf16", "bf16", 5.0), ("mxfp8", "bf16", 4.0), ("mxfp8", "fp8", 3.0)):
        single = {"latency_p90_ns": latency * 1e9, "valid": True, "speed": {"compile": True, "gemm": gemm,
                                                                              "vae": "fp32"}}
        runs.append(make_run(tmp_path / f"{gemm}-{schedule}", schedule,
                             {p: constant_video([100] * 5, 31, 45) for p in PROMPTS},
                             results={"SingleStream": {"performance": single}}))
    out = _compare(runs, tmp_path)
    page = _Page("configurations")
    page.feed((out / "index.html").read_text())
    lines = (tmp_path / "cmp" / "compare.md").read_text().splitlines()
    start = lines.index(next(line for line in lines if line.startswith("Each configuration"))) + 2
    markdown = [[c.strip() for c in line.split("|")[1:-1]] for line in lines[start:] if line.startswith("| ")]
    page_notes = dict(re.findall(r"<li id='note-(\d+)' value='\d+'>([^<]+)</li>", (out / "index.html").read_text()))
    md_notes = dict(re.findall(r"^\[(\d+)\] (.+)$", "\n".join(lines), re.M))
    assert [[_resolve(c.strip(), page_notes) for c in row] for row in page.rows] == [
        [_resolve(c, md_notes) for c in row] for row in markdown]
    assert markdown[0] == ["Schedule", "BF16 GEMMs: latency (s)", "BF16 GEMMs: energy (J)", "FP8 GEMMs: latency (s)",
                           "FP8 GEMMs: energy (J)"]
    assert markdown[1][0] == "BF16" and markdown[1][3:] == ["no run", "no run"]
    assert markdown[2][1] == f"4.000 ({5.0 / 4.0:.2f}×)" and markdown[2][3].startswith("3.000 [")


def test_page_videos_are_even_sided_yuv420p_h264_copies_and_their_differences(runs_without_metrics, tmp_path):
    out = _compare(runs_without_metrics, tmp_path)
    levels = {}
    for prompt in _data(out)["prompts"]:
        for column, cell in zip(("BF16", "MXFP8"), prompt["cells"]):
            for kind in ("video", "diff"):
                if column == "BF16" and kind == "diff":  # the reference against itself: black, so not made
                    assert cell["diff"] is None and cell["no_diff"] == "the reference itself"
                    continue
                reader = imageio_ffmpeg.read_frames(str(out / cell[kind]))
                meta = next(reader)
                frames = [np.frombuffer(f, np.uint8).reshape(32, 46, 3) for f in reader]
                assert meta["codec"] == "h264" and meta["pix_fmt"].startswith("yuv420p") and meta["size"] == (46, 32)
                assert len(frames) == 5
                levels[(column, kind)] = np.mean(frames)
    assert abs(levels[("BF16", "video")] - 100) < 3 and abs(levels[("MXFP8", "video")] - 130) < 3
    assert levels[("MXFP8", "diff")] > 100  # |130 - 100| amplified
    # both prompts' videos are the same grey in each run: one file per run, and one difference, serve them
    assert len(list((out / "videos").glob("*.mp4"))) == 3


def test_a_video_a_browser_plays_as_it_is_is_copied_byte_for_byte(tmp_path):
    """The harness writes H.264 yuv420p with even sides: the page's copy is that file, not a re-encode of it."""
    runs = []
    for schedule, level in (("bf16", 100), ("mxfp8", 140)):
        run = make_run(tmp_path / schedule, schedule, {})
        for prompt in PROMPTS:
            write_video(run / "videos" / f"{prompt}-0.mp4", constant_video([level] * 5, 32, 48), fps=16)
        runs.append(run)
    out = _compare(runs, tmp_path)
    for prompt in _data(out)["prompts"]:
        for run, cell in zip(runs, prompt["cells"]):
            assert (out / cell["video"]).read_bytes() == (run / "videos" / f"{prompt['text']}-0.mp4").read_bytes()


@pytest.mark.slow
def test_a_second_compare_reuses_the_page_videos_and_remakes_only_what_changed(runs_without_metrics, tmp_path):
    out = _compare(runs_without_metrics, tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in (out / "videos").glob("*.mp4")}
    _compare(runs_without_metrics, tmp_path)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "videos").glob("*.mp4")} == before

    bf16, mxfp8 = runs_without_metrics
    make_run(mxfp8, "mxfp8", {PROMPTS[0]: constant_video([160] * 5, 31, 45)})
    _compare(runs_without_metrics, tmp_path)
    cells = {p["text"]: p["cells"] for p in _data(out)["prompts"]}
    changed, kept = cells[PROMPTS[0]][1], cells[PROMPTS[1]][1]
    assert changed["diff"] != kept["diff"] and changed["video"] != kept["video"]
    reader = imageio_ffmpeg.read_frames(str(out / changed["diff"]))
    next(reader)
    assert np.mean([np.frombuffer(f, np.uint8) for f in reader]) > 200  # |160 - 100| x 8, clipped
    now = {p.name for p in (out / "videos").glob("*.mp4")}
    assert now == {Path(c[k]).name for cs in cells.values() for c in cs for k in ("video", "diff") if c[k]}
    assert all(before[name] == (out / "videos" / name).stat().st_mtime_ns for name in now & set(before))


def test_page_refers_only_to_files_beside_it(runs_without_metrics, tmp_path):
    out = _compare(runs_without_metrics, tmp_path)
    text = (out / "index.html").read_text()
    page = _Page()
    page.feed(text)
    assert "http://" not in text and "https://" not in text and "<link" not in text
    for ref in page.refs:
        assert ref.startswith("#") or (out / ref).is_file(), ref


def test_link_refers_to_the_runs_own_videos(runs_without_metrics, tmp_path):
    out = _compare(runs_without_metrics, tmp_path, "--link")
    text = (out / "index.html").read_text()
    assert '"video": "../bf16/videos/a red fox running through fresh snow-0.mp4"' in text
    files = list((out / "videos").glob("*.mp4"))
    assert files and all(f.name.endswith("-diff.mp4") for f in files)


def test_link_without_html_is_refused_before_any_write(runs_without_metrics, tmp_path):
    result = CliRunner().invoke(main, ["compare", *map(str, runs_without_metrics), "--out", str(tmp_path / "cmp"),
                                       "--link"])
    assert result.exit_code == 2 and "fsbench: error: --link only applies to the page" in result.stderr
    assert not (tmp_path / "cmp").exists()


def _compare_in_a_terminal(runs, tmp_path, *options: str) -> tuple[str, str]:
    """`fsbench [OPTIONS] compare --html` with stderr on a pseudo-terminal: (what the terminal got, the stdout)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a new pty is 0 columns wide
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "fsbench", *options, "compare", *map(str, runs), "--out",
                           str(tmp_path / "cmp"), "--html", str(tmp_path / "page")], stdout=subprocess.PIPE,
                          stderr=follower, env=env, timeout=300)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal is closed and drained
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert done.returncode == 0, shown.decode(errors="replace")
    return shown.decode(errors="replace"), done.stdout.decode()


@pytest.mark.slow
def test_the_page_shows_its_progress_on_a_terminal_only_and_not_under_quiet(runs_without_metrics, tmp_path):
    terminal, _ = _compare_in_a_terminal(runs_without_metrics, tmp_path)
    assert "page videos" in terminal and f"0/{2 * len(PROMPTS)}" in terminal
    quiet, stdout = _compare_in_a_terminal(runs_without_metrics, tmp_path, "-q")
    assert "page videos" not in quiet and "index.html" in stdout
    piped = CliRunner().invoke(main, ["compare", *map(str, runs_without_metrics), "--out", str(tmp_path / "cmp"),
                                      "--html", str(tmp_path / "page")])
    assert piped.exit_code == 0 and "page videos" not in piped.output
