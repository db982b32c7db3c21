from pathlib import Path


def test_answer():
    assert Path("/app/answer.txt").read_text().strip() == "pomona-7f3a9c"
