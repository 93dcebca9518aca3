"""MLPerf compliance TEST04 for wan-2.2-t2v-a14b: the audit settings a TEST04 run uses, and the comparison that
writes `TEST04/verify_performance.txt` (the semantics of the reference `compliance/TEST04/verify_performance.py`).

TEST04 issues the same sample (index 3) for every query; a SUT that caches outputs would be faster on it than
in the performance run. It passes when the TEST04 score is not more than 10% (20% for SingleStream under
200000 queries/s, i.e. always for wan) better than the performance run's, and both runs are VALID.
"""
from __future__ import annotations

import re
from pathlib import Path

AUDIT_CONFIG = """\
# MLPerf compliance TEST04 (audit.config): issue sample 3 for every query, performance mode; the lines of the
# official compliance/TEST04/audit.config that apply to wan-2.2-t2v-a14b's two scenarios.
*.Offline.mode = 2
*.Offline.performance_issue_unique = 0
*.Offline.performance_issue_same = 1
*.Offline.performance_issue_same_index = 3
*.SingleStream.mode = 2
*.SingleStream.performance_issue_unique = 0
*.SingleStream.performance_issue_same = 1
*.SingleStream.performance_issue_same_index = 3
wan-2.2-t2v-a14b.Offline.min_query_count = 20
wan-2.2-t2v-a14b.SingleStream.min_query_count = 20
"""
_EARLY_STOPPING = re.compile(r".*Early stopping (90th|90.0th|99.9th) percentile estimate")


def summary_score(summary: str) -> tuple[str, float | None, str | None]:
    """(scenario, score in queries or samples per second, the reason it cannot be compared or None)."""
    scenario, score, problem = "", None, None
    for line in summary.splitlines():
        if line.startswith("Scenario"):
            scenario = line.split(": ", 1)[1].strip()
        elif scenario == "SingleStream" and _EARLY_STOPPING.match(line):
            score = 1e9 / float(line.split(": ", 1)[1].strip())
        elif scenario == "Offline" and line.startswith("Samples per second"):
            score = float(line.split(": ", 1)[1].strip())
        elif line.startswith("Result is") and line.split(": ", 1)[1].strip() == "INVALID":
            problem = "invalid"
    return scenario, score, problem


def verify_performance(reference_summary: Path, test_summary: Path) -> str:
    """The text of verify_performance.txt; it holds `TEST PASS` only when the TEST04 run passes."""
    ref_mode, ref, ref_problem = summary_score(Path(reference_summary).read_text(encoding="utf-8"))
    test_mode, test, test_problem = summary_score(Path(test_summary).read_text(encoding="utf-8"))
    lines = ["Verifying performance."]
    if ref_problem:
        return "\n".join(lines + ["TEST FAIL: Reference results are invalid"]) + "\n"
    if test_problem:
        return "\n".join(lines + ["TEST FAIL: Test results are invalid"]) + "\n"
    if test_mode != ref_mode:
        return "\n".join(lines + ["Test and reference scenarios do not match!"]) + "\n"
    if ref is None or test is None:
        return "\n".join(lines + ["TEST FAIL: a summary has no score line"]) + "\n"
    lines += [f"reference score = {ref}", f"test score = {test}"]
    threshold = 0.20 if ref_mode == "SingleStream" and ref <= 200000 else 0.10
    lines.append("TEST PASS" if test < ref * (1 + threshold) else "TEST FAIL: Test score invalid")
    return "\n".join(lines) + "\n"
