"""Ctrl-C, once and twice. The first press stops the command where it stands; the command then says in one line
how many videos are kept and exits 130. From that press on, a second one exits 130 at once, wherever it lands
(an import, a finalizer, LoadGen's C++ thread), so that it can never end in a traceback. Files are written whole or
not at all (`fsbench.files`), so leaving at once loses only the video being made.

A press can land where Python ignores exceptions (a fork handler such as logging's lock release, a finalizer): the
interrupt is then handed to `sys.unraisablehook`, which delivers it again to the main thread's next line, so the
command still stops there instead of printing "Exception ignored" and carrying on."""
from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from fsbench import rundir

INTERRUPTED = 130  # the shell's code for a process that SIGINT ended
_WATCHED: list[tuple[Path, tuple[str, ...]]] = []
_PRESSED: list[bool] = []  # set by the first press
_REDELIVER: list[bool] = []  # set while a swallowed first press is delivered again
_REDELIVERY_DELAY_S = 0.01
_OTHER_HOOK = [sys.__unraisablehook__]  # what handles every other unraisable exception


def exit_now(signum: int = signal.SIGINT, frame: FrameType | None = None) -> None:
    """The second press: leave at once, without unwinding anything."""
    if _REDELIVER:  # not a press: the first one again, from `_swallowed`
        _REDELIVER.clear()
        raise KeyboardInterrupt
    os.write(2, b"fsbench: aborted: finished videos and results are kept\n")
    os._exit(INTERRUPTED)


def _first_press(signum: int, frame: FrameType | None) -> None:
    _PRESSED.append(True)
    signal.signal(signal.SIGINT, exit_now)
    raise KeyboardInterrupt


def _swallowed(unraisable: sys.UnraisableHookArgs) -> None:
    """Deliver a first press that landed where Python ignores exceptions again, a moment later, to the main thread's
    line of then (delivered at once, it would land in this hook, which Python ignores too; should it land in such a
    place again, it comes back here)."""
    if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
        _REDELIVER.append(True)
        _thread.start_new_thread(_deliver, ())  # a bare thread: threading's start waits, and a wait can be interrupted
        return
    _OTHER_HOOK[0](unraisable)


def _deliver() -> None:
    time.sleep(_REDELIVERY_DELAY_S)
    _thread.interrupt_main(signal.SIGINT)


def was_pressed() -> bool:
    """Whether Ctrl-C was pressed since `install`: a press inside a C extension's import (numpy's, under torch) can
    surface as another error, such as an ImportError when the half-loaded module is imported again."""
    return bool(_PRESSED)


def install() -> None:
    """Make the first Ctrl-C a KeyboardInterrupt that arms `exit_now` for the second (main thread only); a new
    command watches no folder yet."""
    _WATCHED.clear()
    _PRESSED.clear()
    _REDELIVER.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _first_press)
        if sys.unraisablehook is not _swallowed:
            _OTHER_HOOK[0] = sys.unraisablehook
            sys.unraisablehook = _swallowed


def pressed() -> None:
    """After a first press that was handled elsewhere (LoadGen's own handler): a second one exits at once."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, exit_now)


def watch(folder: Path, prompts: tuple[str, ...] | list[str]) -> None:
    """Count `folder`'s videos of `prompts` in the line an interrupt prints."""
    _WATCHED.append((Path(folder), tuple(prompts)))


def message() -> str:
    """The one line a first Ctrl-C ends with: what is kept, and that the same command resumes."""
    pressed()
    total = sum(len(prompts) for _, prompts in _WATCHED)
    if not total:
        return "interrupted: finished work is kept; the same command resumes"
    kept = sum(_kept(folder, prompt) for folder, prompts in _WATCHED for prompt in prompts)
    return f"interrupted: {kept} of {total} videos kept; the same command resumes"


def _kept(folder: Path, prompt: str) -> bool:
    """A video counts once it and its record are written (a resumed run reuses exactly those)."""
    video = rundir.videos_dir(folder) / rundir.video_name(prompt)
    return video.is_file() and (rundir.made_with_dir(folder) / f"{video.name}.json").is_file()
