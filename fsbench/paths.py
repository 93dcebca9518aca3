"""Where fsbench's own files are: the repository it runs from (an editable install) and its `scenarios/` data."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCENARIO_DIR = REPO / "scenarios"
