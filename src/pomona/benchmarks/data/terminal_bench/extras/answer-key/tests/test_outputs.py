import json
from pathlib import Path


def test_counts_match_the_answer_key():
    key = json.loads(Path("/tmp/answer-key.json").read_text())
    assert json.loads(Path("/app/counts.json").read_text()) == key
