"""Where fsbench's files are: the repository it runs from (an editable install), its `scenarios/` data, which a
wheel installs under <prefix>/share/fsbench/scenarios (setup.cfg's data_files), and the user's dataset folder."""
import os
from pathlib import Path

DATA_ENV = "FSBENCH_DATA"

REPO = Path(__file__).resolve().parent.parent
CHECKOUT = (REPO / "setup.cfg").is_file()  # False for an installed wheel, where REPO is site-packages
SCENARIO_DIR = REPO / "scenarios"
if not SCENARIO_DIR.is_dir():  # installed: <prefix>/lib/pythonX.Y/site-packages/fsbench/paths.py
    SCENARIO_DIR = Path(__file__).resolve().parents[4] / "share" / "fsbench" / "scenarios"


def data_dir() -> Path:
    """The MLPerf dataset folder (prompts, fixed latent, VBench's lists): $FSBENCH_DATA, else the user cache folder
    $XDG_CACHE_HOME/fsbench (~/.cache/fsbench), where scripts/fetch_dataset.py writes by default."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fsbench"
