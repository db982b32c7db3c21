import json
from pathlib import Path


def test_the_version_was_published_once():
    published = json.loads(Path("/app/.registry/published.json").read_text())
    assert published == [Path("/app/VERSION").read_text().strip()]
