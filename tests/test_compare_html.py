"""`fsbench compare --html` without a browser: the page's table, gaps, videos and self-containment."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import imageio_ffmpeg
import numpy as np
import pytest
from click.testing import CliRunner

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


def _compare(runs, tmp_path, *extra):
    out = tmp_path / "page"
    result = CliRunner().invoke(main, ["compare", *map(str, runs), "--out", str(tmp_path / "cmp"),
                                       "--frame", "2", "--html", str(out), *extra])
    assert result.exit_code == 0, result.output
    return out


def test_page_shows_every_missing_metric_as_a_footnoted_gap(runs_without_metrics, tmp_path):
    out = _compare(runs_without_metrics, tmp_path)
    page = _Page()
    page.feed((out / "index.html").read_text())
    header, *body = page.rows
    assert header[0] == "Schedule" and "LPIPS ↓" in header and "VBench overall ↑" in header
    notes = dict(re.findall(r"<li id='note-(\d+)' value='\d+'>([^<]+)</li>", (out / "index.html").read_text()))
    mxfp8 = dict(zip(header, next(r for r in body if r[0] == "MXFP8")))
    for column in ("PSNR (dB) ↑", "LPIPS ↓", "VBench overall ↑", "SingleStream p90 latency (s) ↓"):
        mark = re.fullmatch(r"n/a\[(\d+)\]", mxfp8[column])
        assert mark, f"{column}: {mxfp8[column]!r}"
        assert notes[mark.group(1)]
    assert "not evaluated against BF16" in notes[re.fullmatch(r"n/a\[(\d+)\]", mxfp8["LPIPS ↓"]).group(1)]
    assert all(cell.strip() for row in body for cell in row)
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
    assert [[c.strip() for c in row] for row in page.rows] == markdown
    assert markdown[0] == ["Schedule", "BF16 GEMMs: latency (s)", "BF16 GEMMs: energy (J)", "FP8 GEMMs: latency (s)",
                           "FP8 GEMMs: energy (J)"]
    assert markdown[1][0] == "BF16" and markdown[1][3:] == ["no run", "no run"]
    assert markdown[2][1] == f"4.000 ({5.0 / 4.0:.2f}×)" and markdown[2][3].startswith("3.000 [")


def test_page_videos_are_even_sided_yuv420p_h264_copies_and_their_differences(runs_without_metrics, tmp_path):
    out = _compare(runs_without_metrics, tmp_path)
    videos = sorted((out / "videos").glob("*.mp4"))
    assert len(videos) == 2 * len(PROMPTS) * 2  # a copy and a difference video per prompt and run
    for video in videos:
        reader = imageio_ffmpeg.read_frames(str(video))
        meta = next(reader)
        frames = [np.frombuffer(f, np.uint8).reshape(32, 46, 3) for f in reader]
        assert meta["codec"] == "h264" and meta["pix_fmt"].startswith("yuv420p") and meta["size"] == (46, 32)
        assert len(frames) == 5
        level = np.mean(frames)
        if video.name.endswith("-c00-diff.mp4"):  # BF16 against itself
            assert level < 2
        elif video.name.endswith("-c01-diff.mp4"):  # |130 - 100| amplified
            assert level > 100
        elif video.name.endswith("-c00.mp4"):
            assert abs(level - 100) < 3


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
    assert not list((out / "videos").glob("p*-c??.mp4")) and list((out / "videos").glob("*-diff.mp4"))


def test_link_without_html_is_refused_before_any_write(runs_without_metrics, tmp_path):
    result = CliRunner().invoke(main, ["compare", *map(str, runs_without_metrics), "--out", str(tmp_path / "cmp"),
                                       "--link"])
    assert result.exit_code == 2 and "fsbench: error: --link only applies to the page" in result.stderr
    assert not (tmp_path / "cmp").exists()
