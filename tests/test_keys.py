"""API key lists, as `pomona serve` and `pomona proxy` take them."""

from __future__ import annotations

import pytest

from pomona.keys import parse_keys


def test_entries_split_on_commas_spaces_and_newlines() -> None:
    text = "alice:k1, bob:k2\ncarol:k:3"
    assert parse_keys(text, "POMONA_API_KEYS") == {"alice": "k1", "bob": "k2", "carol": "k:3"}
    assert parse_keys(None, "POMONA_API_KEYS") == {} == parse_keys(" \n", "X")


@pytest.mark.parametrize("entry", ["nokeyhere-secret", ":secret-key", "alice:"])
def test_a_malformed_entry_names_its_source_and_does_not_echo_the_key(entry: str) -> None:
    with pytest.raises(ValueError, match="keys.txt entry .* is not name:key") as e:
        parse_keys(f"ok:fine {entry}", "keys.txt")
    assert "secret" not in str(e.value)
