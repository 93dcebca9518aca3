"""Where fsbench's own files are: the repository it runs from (an editable install) and its `scenarios/` data,
which a wheel installs under <prefix>/share/fsbench/scenarios (setup.cfg's data_files)."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECKOUT = (REPO / "setup.cfg").is_file()  # False for an installed wheel, where REPO is site-packages
SCENARIO_DIR = REPO / "scenarios"
if not SCENARIO_DIR.is_dir():  # installed: <prefix>/lib/pythonX.Y/site-packages/fsbench/paths.py
    SCENARIO_DIR = Path(__file__).resolve().parents[4] / "share" / "fsbench" / "scenarios"
