import json
import re
from pathlib import Path


def expected():
    counts = {}
    for log in Path("/app/logs").glob("*.log"):
        counts[log.stem] = sum(1 for line in log.read_text().splitlines()
                               if re.match(r"^\S+ ERROR ", line))
    return counts


def test_report_exists():
    assert Path("/app/report.json").is_file()


def test_counts_match():
    report = json.loads(Path("/app/report.json").read_text())
    assert report == expected()
    assert report["cache"] == 0
