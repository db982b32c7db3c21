import subprocess
from pathlib import Path

REPO = "/app/project"


def git(*args):
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout


def test_file_restored_with_last_content():
    path = Path(REPO) / "config" / "credentials.ini"
    assert path.read_text() == "[db]\nuser = app\npassword = hunter2\nport = 5433\n"


def test_committed_and_clean():
    assert "config/credentials.ini" in git("ls-files")
    assert git("status", "--porcelain") == ""
    assert "v3" in git("log", "--format=%s")
