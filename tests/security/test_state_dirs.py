"""A sandbox against another runtime's state: another state dir's store image holds every file of
its sandboxes. Placed outside the places the host image always hides (/tmp, /var/lib/pomona),
so only the state-dir registry protects it."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from pomona import SandboxClient
from tests.conftest import SESSION

VICTIM_ROOT = Path(f"/var/lib/pomona-security-{SESSION}")


@pytest.fixture(scope="module")
def victim():
    """Another runtime with a sandbox holding a secret, in a state dir outside the usual places."""
    state = VICTIM_ROOT / "victim"
    client = SandboxClient("local", state_dir=str(state))
    try:
        sb = client.create_sandbox("host")
        sb.write_file("/workspace/secret.txt", b"victim secret 7311\n")
        yield state
    finally:
        client.close()
        shutil.rmtree(VICTIM_ROOT, ignore_errors=True)


def test_state_dirs_and_stores_are_private(victim):
    assert stat.S_IMODE(victim.stat().st_mode) == 0o700
    assert stat.S_IMODE((victim / "store.xfs").stat().st_mode) == 0o600


@pytest.mark.parametrize("user", ["pomona", "root"])
def test_another_state_dir_is_invisible_inside(victim, local_client, user):
    with local_client.create_sandbox("host", user=user) as sb:
        result = sb.exec(f"ls -A {victim} 2>&1; head -c 4 {victim}/store.xfs 2>/dev/null; echo end")
    # the directory may show (empty: an opaque layer hides it), its contents never
    assert (
        "store.xfs" not in result.stdout and "XFSB" not in result.stdout
    )  # XFSB: the store's magic
    assert result.stdout.strip() == "end"
