"""Links and markers around the folders fsbench writes: no write, rename or removal follows a symbolic link out of
a folder fsbench owns, a marker alone never makes a folder fsbench's, the folder rule is applied where a path
leads, and LoadGen's temporaries stay in the staging place. Every case runs the real CLI and checks, byte for
byte, that the user's files are as they were."""
from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsbench import files
from fsbench.harness.cli import main
from fsbench.harness.mlperf.loadgen import LoadgenOptions, run_test
from fsbench.harness.run import lock
from fsbench.rundir import BENCHMARK, LOCK, LOG, loadgen_dir

from eval_runs import constant_video, make_run

SMALL = ["--model", "tiny", "--height", "16", "--width", "16", "--frames", "1", "--steps", "1"]
TINY = [*SMALL, "--num-prompts", "1", "--scenario", "Offline", "--mode", "accuracy"]


def state(root: Path, bookkeeping: bool = True) -> dict[str, str]:
    """Every file, folder and link under `root` (links not followed) with its bytes' digest or its target; without
    `bookkeeping`, less fsbench's own place and lock of an fsbench folder (which any command that takes it writes)."""
    found = {}
    for here, dirs, names in os.walk(root):
        if not bookkeeping and Path(here) == root:
            dirs[:] = [d for d in dirs if d != files.OWNED]
            names = [n for n in names if n != LOCK]
        for name in (*dirs, *names):
            path = Path(here) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = f"link {os.readlink(path)}"
            elif path.is_file():
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[key] = "folder"
    return found


def user_folder(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "thesis.txt").write_text("years of work")
    (root / "sub" / "data.bin").write_bytes(os.urandom(64))
    (root / f"{files.TEMP_PREFIX}looks-like-ours").write_text("but is the user's")
    return root


def invoke(*args) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stderr.strip().splitlines(), result.output


def a_run(path: Path) -> Path:
    run = make_run(path, "bf16", {"p": constant_video(range(100, 105))})
    files.atomic_write_text(path / files.OWNED / files.KIND, "run\n")
    return run


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_a_run_whose_staging_links_to_a_users_folder_is_refused_and_the_folder_kept(relative, tmp_path):
    mine = user_folder(tmp_path / "mine")
    run = a_run(tmp_path / "runs" / "received")
    (run / files.OWNED / files.STAGING).symlink_to("../../../mine" if relative else mine)
    before = state(tmp_path)
    for args in (["run", "--out", run, *SMALL], ["eval", run, "--metrics", "psnr", "--reference", run]):
        code, lines, output = invoke(*args)
        assert code == 2 and "Traceback" not in output, output
    code, lines, output = invoke("run", "--out", run, *SMALL)
    assert len(lines) == 1 and "symbolic link" in lines[0] and str(run / files.OWNED / files.STAGING) in lines[0]
    assert state(tmp_path) == before


def test_a_page_marker_over_a_users_videos_is_refused_and_no_video_deleted(tmp_path):
    run = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    page = tmp_path / "page"
    (page / "videos").mkdir(parents=True)
    (page / "videos" / "holiday.mp4").write_bytes(os.urandom(300))
    files.atomic_write_text(page / files.OWNED / files.KIND, "page\n")
    before = state(page)
    code, lines, output = invoke("compare", run, "--out", tmp_path / "cmp", "--html", page)
    assert code == 2 and len(lines) == 1 and str(page) in lines[0] and "did not write" in lines[0], output
    assert state(page) == before


def test_a_page_removes_only_the_old_videos_it_recorded(tmp_path):
    first = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    second = make_run(tmp_path / "bf16b", "bf16", {"p": constant_video(range(50, 55))})
    page = tmp_path / "page"
    assert invoke("compare", first, "--out", tmp_path / "c1", "--html", page)[0] == 0
    old = sorted((page / "videos").iterdir())
    assert old
    assert invoke("compare", second, "--out", tmp_path / "c2", "--html", page)[0] == 0
    assert not any(p.exists() for p in old)  # recorded, then no longer used: removed
    (page / "videos" / "holiday.mp4").write_bytes(b"the user's")
    code, lines, _ = invoke("compare", first, "--out", tmp_path / "c3", "--html", page)
    assert code == 2 and "did not write" in lines[0]
    assert (page / "videos" / "holiday.mp4").read_bytes() == b"the user's"


def test_eval_never_writes_through_a_run_folder_that_links_out(tmp_path):
    mine = user_folder(tmp_path / "mine")
    run = a_run(tmp_path / "run")
    (run / "eval").symlink_to(mine)
    before = state(mine)
    code, lines, output = invoke("eval", run, "--metrics", "psnr", "--reference", make_run(
        tmp_path / "ref", "bf16", {"p": constant_video(range(100, 105))}))
    assert code == 2 and len(lines) == 1 and f"symbolic link {run / 'eval'}" in lines[0], output
    assert state(mine) == before


@pytest.mark.parametrize("name", [LOCK, LOG])
def test_a_lock_or_log_that_links_to_a_users_file_is_never_written_through(name, tmp_path, one_thread):
    mine = user_folder(tmp_path / "mine")
    run = tmp_path / "run"
    command = ("run", "--out", run, *SMALL, "--num-prompts", 1, "--mode", "accuracy")
    assert invoke(*command)[0] == 0
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(mine / "thesis.txt")
    before = state(mine)
    code, lines, output = invoke(*command)
    assert code == 2 and len(lines) == 1 and f"{run / name} is a symbolic link" in lines[0], output
    assert state(mine) == before


def test_run_out_through_a_link_into_another_run_is_refused_naming_both(tmp_path):
    other = a_run(tmp_path / "other")
    link = tmp_path / "link"
    link.symlink_to(other / "videos")
    before = state(tmp_path)
    code, lines, output = invoke("run", "--out", link / "new", *SMALL)
    assert code == 2 and len(lines) == 1, output
    assert str(link / "new") in lines[0] and str(other.resolve() / "videos" / "new") in lines[0]
    assert f"inside the run folder {other.resolve()}" in lines[0]
    assert state(tmp_path) == before


def test_a_campaign_out_through_a_link_into_a_run_is_refused_before_any_write(tmp_path):
    run = a_run(tmp_path / "run")
    link = tmp_path / "results"
    link.symlink_to(run / "videos")
    plan = tmp_path / "plan.toml"
    plan.write_text(f'model = "tiny"\nschedules = ["bf16"]\nout = "{link / "camp"}"\n')
    before = state(tmp_path)
    for args in (["campaign", plan, "--dry-run"], ["campaign", plan]):
        code, lines, output = invoke(*args)
        assert code == 2 and len(lines) == 1 and str(run.resolve() / "videos" / "camp") in lines[0], output
    assert state(tmp_path) == before


def test_loadgen_temporaries_live_in_staging_and_a_resume_removes_those_left_beside_the_logs(tmp_path):
    run = a_run(tmp_path / "run")
    seen = []
    log_dir = loadgen_dir(run, "sys", "Offline", "accuracy")

    def generate(index: int) -> str:
        seen.extend(p for p in run.rglob(f"{files.TEMP_PREFIX}*") if files.OWNED not in p.parts)
        return f"videos/{index}.mp4"

    with lock.hold(run):
        run_test(generate, 2, LoadgenOptions("Offline", "accuracy"), log_dir)
    assert (log_dir / "mlperf_log_detail.txt").is_file() and seen == []
    left = run / "sys" / BENCHMARK / "Offline" / f"{files.TEMP_PREFIX}accuracy-x1" / "logs"
    left.mkdir(parents=True)
    (left / "mlperf_log_detail.txt").write_text("from a killed pass")
    with lock.hold(run):
        pass
    assert not left.parent.exists() and (log_dir / "mlperf_log_detail.txt").is_file()


SEED = 20261207
KINDS = ("run", "sweep", "compare", "page", "submission", "campaign", "tune", "user's")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A real run folder of the tiny model (one prompt, one 16x16 frame): what a run, sweep or eval resumes."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = tmp_path_factory.mktemp("tiny") / "run"
        code, _, output = invoke("run", "--out", run, *TINY)
        assert code == 0, output
    finally:
        torch.set_num_threads(threads)
    return run


def _tree_around(rng, out: Path, mine: Path, other: Path, tiny: Path, run_first: bool) -> dict[str, str]:
    """A random folder at `out`: absent, empty, a run, a folder of the user's, or a link to one of those, with
    random markers, links from fsbench's places (its staging, videos/, made_with/, eval/) to the user's folder or
    another run (absolute or relative) and files of the user's inside. Returns the user's files put inside (path
    relative to `out` -> digest), which must be there, unchanged, afterwards. `run_first`: mostly a real run."""
    bases = ["absent", "empty", "run", "user", "link-user", "link-other", "link-into-other"]
    base = "run" if run_first and rng.random() < 0.6 else rng.choice(bases)
    if base == "link-user":
        out.symlink_to(mine if rng.random() < 0.5 else os.path.relpath(mine, out.parent))
        return {}
    if base in ("link-other", "link-into-other"):
        out.symlink_to(other if base == "link-other" else other / "videos" / "deeper")
        return {}
    if base == "absent":
        return {}
    if base == "run":
        shutil.copytree(tiny, out, symlinks=True)
    out.mkdir(parents=True, exist_ok=True)
    if base == "empty":
        return {}
    planted: dict[str, str] = {}
    if rng.random() < (0.3 if base == "run" else 0.7):
        kind = rng.choice(KINDS)
        (out / files.OWNED).mkdir(exist_ok=True)
        (out / files.OWNED / files.KIND).write_text(f"{kind}\n")
    for place in rng.sample([f"{files.OWNED}/{files.STAGING}", files.OWNED, "videos", "made_with", "eval",
                             "videos/holiday", "compare", LOCK, LOG], k=rng.randint(1, 3)):
        target = out / place
        if os.path.lexists(target.parent) and not target.parent.is_dir() or target.parent.is_symlink():
            continue
        if target.is_dir() and not target.is_symlink():  # a place of fsbench's own, made a link instead
            shutil.rmtree(target)
        elif os.path.lexists(target):
            target.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        to = mine / "thesis.txt" if place in (LOCK, LOG) else rng.choice([mine, other, other / "videos"])
        target.symlink_to(to if rng.random() < 0.5 else os.path.relpath(to, target.parent))
    for name in rng.sample(["videos/holiday.mp4", "notes.txt", "index.html", f"{files.TEMP_PREFIX}mine",
                            "eval/mine.csv"], k=rng.randint(0, 2)):
        path = out / name
        if any(p.is_symlink() for p in (path, *path.parents) if p.is_relative_to(out) and p != out):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(rng.randint(1, 200))
        path.write_bytes(data)
        planted[name] = hashlib.sha256(data).hexdigest()
    return planted


def _commands(out: Path, reference: Path, scratch: Path, plan: Path) -> dict[str, list]:
    plan.write_text(f'model = "tiny"\nschedules = ["bf16"]\nout = "{out}"\n')
    return {
        "compare": ["compare", reference, "--out", out],
        "compare --html": ["compare", reference, "--out", scratch / "cmp", "--html", out],
        "eval": ["eval", out, "--metrics", "psnr", "--reference", reference],
        "run": ["run", "--out", out, *TINY],
        "sweep": ["sweep", "--schedules", "bf16", "--out", out, *TINY[:-4]],
        "campaign": ["campaign", plan, "--dry-run"],
        "submission": ["submission", "--runs", reference, "--out", out, "--submitter", "org", "--system", "x"],
    }


@pytest.mark.parametrize("trial", range(28))
def test_random_trees_of_links_and_markers_never_change_a_byte_outside_fsbench_s_files(trial, tmp_path, one_thread,
                                                                                       tiny_run):
    """Seeded random trees around every command that writes (the tiny model's run and sweep included): whatever
    the command says, the user's folder, another run, and the user's files inside the output are as they were."""
    rng = random.Random(SEED + trial)
    mine = user_folder(tmp_path / "mine")
    other = a_run(tmp_path / "other")
    (other / "videos" / "deeper").mkdir()
    reference = shutil.copytree(tiny_run, tmp_path / "reference")
    out = tmp_path / "work" / "out"
    out.parent.mkdir()
    commands = _commands(out, reference, tmp_path / "scratch", tmp_path / "plan.toml")
    name = sorted(commands)[trial % len(commands)]
    planted = _tree_around(rng, out, mine, other, tiny_run, name in ("run", "eval"))
    protected = {p: state(p, p == mine) for p in (mine, other, reference)}
    code, lines, output = invoke(*commands[name])
    assert code in (0, 2) and "Traceback" not in output, (name, output)
    assert code == 0 or len(lines) == 1, (name, output)
    assert {p: state(p, p == mine) for p in protected} == protected, (name, output)
    for path, digest in planted.items():
        assert hashlib.sha256((out / path).read_bytes()).hexdigest() == digest, (name, path, output)


@pytest.mark.parametrize("kind", ["campaign", "submission", "sweep", "run", "compare"])
def test_a_marker_over_a_users_folder_does_not_make_it_fsbench_s(kind, tmp_path):
    folder = user_folder(tmp_path / "mine")
    files.atomic_write_text(folder / files.OWNED / files.KIND, f"{kind}\n")
    plan = tmp_path / "plan.toml"
    plan.write_text(f'model = "tiny"\nschedules = ["bf16"]\nout = "{folder}"\n')
    run = make_run(tmp_path / "bf16", "bf16", {"p": constant_video(range(100, 105))})
    command = {"campaign": ["campaign", plan, "--dry-run"], "run": ["run", "--out", folder, *SMALL],
               "sweep": ["sweep", "--schedules", "bf16", "--out", folder, *SMALL],
               "compare": ["compare", run, "--out", folder],
               "submission": ["submission", "--runs", run, "--out", folder, "--submitter", "o", "--system", "s"]}
    before = state(tmp_path)
    code, lines, output = invoke(*command[kind])
    assert code == 2 and len(lines) == 1 and f"{folder} is a folder fsbench did not write" in lines[0], output
    assert state(tmp_path) == before
