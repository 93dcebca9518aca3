"""The `fsbench compare --html` page in Debian's headless Chromium, on tiny-model runs made the quickstart's way.

Installs chromium and chromium-driver with apt-get when missing and running as root; elsewhere it skips with the
reason, except under CI (CI=true), where a skip would hide a broken page and so fails instead.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fsbench.paths import REPO

pytestmark = pytest.mark.slow

SCHEDULES = ("bf16", "mxfp8", "hybrid")
FPS = 16
SIZE = ["--height", "32", "--width", "32", "--frames", "17", "--steps", "2", "--num-prompts", "3"]
SCREENSHOT = REPO / "results" / "runs" / "browser" / "compare_page.png"
# the video (or difference video) each shown cell displays, as a JavaScript expression
SHOWN = ("[...document.querySelectorAll('#grid tbody tr:not([hidden]) .cell')].map(b => "
         "b.querySelector(b.dataset.view === 'diff' ? '.diff' : '.video'))")


def _unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (under CI a skip of the browser test counts as a failure)")
    pytest.skip(reason)


def _chromium() -> tuple[str, str]:
    """Paths of Debian's chromium and chromedriver, installing both when missing and allowed to."""
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if not all(found) and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run("apt-get update && apt-get install -y chromium chromium-driver", shell=True,
                       capture_output=True, check=False, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        found = shutil.which("chromium"), shutil.which("chromedriver")
    if not all(found):
        _unavailable("no chromium/chromedriver and cannot install them (run as root: "
                     "apt-get install -y chromium chromium-driver)")
    return found


def _fsbench(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "fsbench", *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"fsbench {' '.join(args)}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """An accuracy sweep, a short SingleStream run per schedule and PSNR/SSIM against BF16, at 32x32, 17 frames."""
    root = tmp_path_factory.mktemp("quick")
    _fsbench("sweep", "--model", "tiny", "--preset", "mlperf", "--schedules", ",".join(SCHEDULES), *SIZE,
             "--out", str(root))
    for schedule in SCHEDULES:
        _fsbench("run", "--model", "tiny", "--preset", "mlperf", "--schedule", schedule, "--scenario", "SingleStream",
                 *SIZE, "--count", "8", "--time", "0", "--target-latency", "100", "--out", str(root / schedule))
    for schedule in SCHEDULES[1:]:
        _fsbench("eval", str(root / schedule), "--reference", str(root / "bf16"), "--metrics", "psnr,ssim",
                 "--workers", "1")
    return root


@pytest.fixture(scope="module")
def page(runs) -> Path:
    _fsbench("compare", *(str(runs / s) for s in SCHEDULES), "--out", str(runs / "compare"), "--html",
             str(runs / "html"))
    return runs / "html" / "index.html"


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (pip install -e .[dev])")
    chromium, chromedriver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    # file:// pages count as one origin only with this flag, so the test may read video pixels from a canvas
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--mute-audio",
                "--autoplay-policy=no-user-gesture-required", "--allow-file-access-from-files",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    yield driver
    driver.quit()


def _open(browser, page: Path, timeout: float = 30.0) -> int:
    """Load the page and wait until every shown video can play on (readyState >= 3); returns how many."""
    browser.get(page.as_uri())
    return _wait_playable(browser, timeout)


def _wait_playable(browser, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = browser.execute_script(f"return {SHOWN}.map(v => v.tagName === 'VIDEO' ? v.readyState : -1)")
        if states and min(states) >= 3:
            return len(states)
        time.sleep(0.2)
    pytest.fail(f"videos not playable after {timeout} s: readyState {states} (a codec Chromium cannot decode?)")


def _times(browser) -> tuple[list[float], float, list[bool]]:
    """currentTime of every shown video read in one script run, the duration, and whether each is paused."""
    times, duration, paused = browser.execute_script(
        f"const videos = {SHOWN}; return [videos.map(v => v.currentTime), videos[0].duration, "
        "videos.map(v => v.paused)]")
    return times, duration, paused


def _spread(times: list[float], duration: float) -> float:
    """Largest distance of any video from the first, measured around the loop (0 s and the end are adjacent)."""
    return max(min(abs(t - times[0]), duration - abs(t - times[0])) for t in times)


def _seek(browser, fraction: float) -> None:
    browser.execute_script("const s = document.getElementById('seek'); s.value = arguments[0];"
                           "s.dispatchEvent(new Event('input'));", fraction)
    deadline = time.monotonic() + 10
    while browser.execute_script(f"return {SHOWN}.some(v => v.seeking)") and time.monotonic() < deadline:
        time.sleep(0.05)


def test_videos_play_in_sync_while_playing_and_after_a_seek(browser, page):
    assert _open(browser, page) == 3 * len(SCHEDULES)
    assert browser.execute_script("return document.getElementById('loop').checked")
    samples = []
    for _ in range(6):
        times, duration, paused = _times(browser)
        assert not any(paused)
        samples.append(times)
        assert _spread(times, duration) <= 1 / FPS, times
        time.sleep(0.15)
    assert len({round(s[0], 3) for s in samples}) == len(samples)  # the clock moved between samples
    assert duration == pytest.approx(17 / FPS, abs=1 / FPS)

    browser.find_element("id", "play").click()
    _seek(browser, 0.5)
    times, duration, paused = _times(browser)
    assert all(paused) and all(abs(t - duration / 2) <= 1 / FPS for t in times), times
    browser.find_element("id", "play").click()
    for _ in range(5):
        times, duration, paused = _times(browser)
        assert not any(paused) and _spread(times, duration) <= 1 / FPS, times
        time.sleep(0.15)


def test_difference_view_is_black_for_the_reference_and_not_for_the_others(browser, page):
    _open(browser, page)
    browser.find_element("id", "view-diff").click()
    _wait_playable(browser)
    browser.find_element("id", "play").click()
    _seek(browser, 0.5)
    levels = browser.execute_script(f"return {SHOWN}.map(v => {{"
                                    "const c = document.createElement('canvas'); c.width = v.videoWidth;"
                                    "c.height = v.videoHeight; const g = c.getContext('2d'); g.drawImage(v, 0, 0);"
                                    "const px = g.getImageData(0, 0, c.width, c.height).data; let s = 0;"
                                    "for (let i = 0; i < px.length; i += 4) s += px[i] + px[i + 1] + px[i + 2];"
                                    "return [v.closest('.cell').dataset.column, v.className, s / (px.length / 4 * 3)];"
                                    "})")
    assert len(levels) == 3 * len(SCHEDULES) and {kind for _, kind, _ in levels} == {"diff"}
    for column, _, level in levels:
        if column == "BF16":
            assert level < 2, levels
        else:
            assert level > 5, levels


def test_sorting_by_worst_psnr_and_searching_reorder_the_rows(browser, page, runs):
    from selenium.webdriver.support.ui import Select

    _open(browser, page)
    worst = {}
    for schedule in SCHEDULES[1:]:
        with open(runs / schedule / "eval" / "fidelity.csv") as f:
            for row in csv.DictReader(f):
                worst[row["prompt"]] = min(worst.get(row["prompt"], float("inf")), float(row["psnr"]))
    Select(browser.find_element("id", "sort")).select_by_value("psnr")
    shown = "return [...document.querySelectorAll('#grid tbody tr:not([hidden])')].map(r => r.dataset.prompt)"
    assert browser.execute_script(shown) == sorted(worst, key=worst.get)
    browser.find_element("id", "search").send_keys("fox")
    assert browser.execute_script(shown) == ["a red fox running through fresh snow"]


def test_page_shows_tables_plots_provenance_and_keeps_a_screenshot(browser, page, runs):
    _open(browser, page)
    text = browser.find_element("tag name", "body").text
    assert "Speedup vs BF16" in text and "reference" in text
    assert "fsbench run --model tiny" in text and "fsbench sweep --model tiny" in text
    assert browser.execute_script("return [...document.images].every(i => i.complete && i.naturalWidth > 0)")
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, height)
    _wait_playable(browser)
    time.sleep(0.5)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT))
    print(f"screenshot: {SCREENSHOT}")


PROMPT_COUNT, WORDS = 248, ("fox", "boat", "cat", "kite")
ERRORS = "window.pageErrors = []; window.addEventListener('error', e => window.pageErrors.push(e.message));"


@pytest.fixture(scope="module")
def big_page(tmp_path_factory) -> Path:
    """248 prompts through 3 schedules, as the MLPerf prompt set gives: 16 frames of 16x16 whose grey level climbs
    frame by frame, one file per schedule copied under every prompt's name (the page then shares one encode)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from eval_runs import make_run

    root = tmp_path_factory.mktemp("big")
    prompts = [f"prompt {i:03d}: a {WORDS[i % len(WORDS)]}" for i in range(PROMPT_COUNT)]
    runs = []
    for offset, schedule in enumerate(SCHEDULES):
        frames = np.stack([np.full((16, 16, 3), 20 + 12 * i + 20 * offset, np.uint8) for i in range(16)])
        run = make_run(root / schedule, schedule, {prompts[0]: frames})
        for prompt in prompts[1:]:
            shutil.copyfile(run / "videos" / f"{prompts[0]}-0.mp4", run / "videos" / f"{prompt}-0.mp4")
        runs.append(run)
    _fsbench("-q", "compare", *map(str, runs), "--out", str(root / "compare"), "--html", str(root / "html"))
    return root / "html" / "index.html"


def _views(browser) -> dict:
    """What the page shows now: rows shown, the view of each shown cell, the buttons' state and script errors."""
    return browser.execute_script(
        "const shown = [...document.querySelectorAll('#grid tbody tr:not([hidden])')];"
        "return {rows: shown.length, views: [...new Set(shown.flatMap(r => [...r.querySelectorAll('.cell')]"
        ".map(b => b.dataset.view + ':' + (b.querySelector(b.dataset.view === 'diff' ? 'video.diff' : 'video.video')"
        " ? 'playing' : 'none'))))], diffOn: document.getElementById('view-diff').classList.contains('on'),"
        "videoOn: document.getElementById('view-video').classList.contains('on'), errors: window.pageErrors};")


def _toggle(browser, view: str, rows: int) -> None:
    """Press a view button; every shown cell, the buttons and the clock must follow, with no script error."""
    browser.find_element("id", f"view-{view}").click()
    shown = _views(browser)
    assert shown == {"rows": rows, "views": [f"{view}:playing"], "diffOn": view == "diff",
                     "videoOn": view == "video", "errors": []}, shown
    _seek(browser, 0.5)  # every shown video, loaded or not (Chromium loads only some of 1488 at once)
    times, duration, _ = _times(browser)
    assert len(times) == 3 * rows and all(abs(t - duration / 2) <= 1 / FPS for t in times), times


def test_the_view_buttons_hold_at_248_prompts_after_show_all_and_after_a_filter(browser, big_page):
    browser.get(big_page.as_uri())
    browser.execute_script(ERRORS)
    browser.find_element("id", "play").click()  # paused: the re-seek is then exact
    assert browser.find_element("id", "count").text == f"24 of {PROMPT_COUNT} prompts shown"
    _toggle(browser, "diff", 24)
    browser.find_element("id", "more").click()
    assert _views(browser)["views"] == ["diff:playing"]  # the rows shown now take the view chosen before
    _toggle(browser, "video", PROMPT_COUNT)
    _toggle(browser, "diff", PROMPT_COUNT)

    browser.find_element("id", "search").send_keys("fox")
    _toggle(browser, "video", PROMPT_COUNT // len(WORDS))
    _toggle(browser, "diff", PROMPT_COUNT // len(WORDS))
    browser.find_element("id", "search").clear()
    browser.execute_script("document.getElementById('search').dispatchEvent(new Event('input'))")
    assert _views(browser) == {"rows": PROMPT_COUNT, "views": ["diff:playing"], "diffOn": True, "videoOn": False,
                               "errors": []}


def test_every_row_shows_the_same_frame_across_the_loop_point(browser, big_page):
    browser.get(big_page.as_uri())
    browser.find_element("id", "search").send_keys("00: a fox")  # prompts 0, 100 and 200
    _wait_playable(browser, 60)
    _, duration, _ = _times(browser)
    _seek(browser, 1 - 3 / (FPS * duration))  # three frames before the end, still playing
    wrapped = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and len(wrapped) < 8:
        times, duration, paused = _times(browser)
        if times[0] < duration / 2:  # past the loop point
            wrapped.append(times)
            assert _spread(times, duration) <= 1 / FPS, times
        time.sleep(0.03)
    assert wrapped, "the clock never wrapped"
