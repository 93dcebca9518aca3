"""Runs inside the vbench environment (.venv-vbench): `python vbench_runner.py JOB.json`.

Imports nothing from fsbench (that environment has transformers 4.33 and numpy<2, not fsbench's stack). For each
dimension of the job it calls VBench's own `evaluate` in the job's mode (standard, as the MLPerf reference does; a
custom prompt set's custom-input) with local checkpoints, writes `<results_dir>/<dimension>.json` and prints one
JSON line `{"dimension": ..., "result": path}` on stdout; VBench's own chatter goes to stderr.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys


def _plain(value):
    """JSON-safe copy of VBench's results (numpy scalars and bools become Python ones)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value


def run_dimension(job: dict, dimension: str, device: str) -> str:
    from vbench import VBench

    bench = VBench(device, job["full_info"], job["output_path"])
    with contextlib.redirect_stdout(sys.stderr):
        bench.evaluate(videos_path=job["videos_path"], name=dimension, dimension_list=[dimension], local=True,
                       mode=job.get("mode", "vbench_standard"))
    with open(os.path.join(job["output_path"], f"{dimension}_eval_results.json")) as f:
        score, per_video = json.load(f)[dimension]
    result = {
        "dimension": dimension,
        "score": float(score),
        "videos": [{"video": os.path.basename(v["video_path"]), "score": _plain(v["video_results"])}
                   for v in per_video],
        "device": device,
    }
    path = os.path.join(job["results_dir"], f"{dimension}.json")
    tmp = f"{path}.{os.getpid()}.tmp"  # fsbench.files is not importable in this environment: the same steps here
    try:
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def main(job_path: str) -> None:
    with open(job_path) as f:
        job = json.load(f)
    os.makedirs(job["results_dir"], exist_ok=True)
    device = job.get("device", "auto")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    for dimension in job["dimensions"]:
        path = run_dimension(job, dimension, device)
        print(json.dumps({"dimension": dimension, "result": path}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
