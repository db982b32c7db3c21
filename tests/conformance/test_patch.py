"""apply_patch: git apply first, then fallbacks, and a clear report when nothing applies."""

from __future__ import annotations

import pytest

ORIGINAL = "".join(f"line {i}\n" for i in range(1, 21))

CLEAN = """--- a/f.txt
+++ b/f.txt
@@ -9,3 +9,3 @@
 line 9
-line 10
+line ten
 line 11
"""

# the context moved down two lines and one context line differs: git apply refuses, fuzz works
SHIFTED = """--- a/f.txt
+++ b/f.txt
@@ -5,3 +5,3 @@
 line 11
-line 12
+line twelve
 line 13 (changed upstream)
"""

WRONG = """--- a/f.txt
+++ b/f.txt
@@ -1,3 +1,3 @@
 nothing like this
-is in the file
+at all
 anywhere
"""


@pytest.fixture
def repo(sandbox):
    sandbox.write_file("repo/f.txt", ORIGINAL)
    r = sandbox.exec(
        "git init -q && git add -A && git -c user.email=a@b -c user.name=n commit -qm base",
        cwd="/workspace/repo",
    )
    assert r.exit_code == 0, r.stderr
    return sandbox


def test_clean_patch_uses_git_apply(repo):
    result = repo.apply_patch(CLEAN, cwd="repo")
    assert result.success and result.method == "git apply"
    assert "line ten\n" in repo.read_file("repo/f.txt").decode()


def test_fuzzy_patch_falls_back(repo):
    result = repo.apply_patch(SHIFTED, cwd="repo")
    assert result.success and result.method == "patch --fuzz=5", result.error
    text = repo.read_file("repo/f.txt").decode()
    assert "line twelve\n" in text and "line 12\n" not in text
    assert repo.exec("git status --porcelain", cwd="/workspace/repo").stdout == " M f.txt\n"


def test_failing_patch_reports_every_attempt_and_changes_nothing(repo):
    result = repo.apply_patch(WRONG, cwd="repo")
    assert not result.success
    for method in ("git apply", "patch --fuzz=5"):
        assert method in result.error
    assert repo.read_file("repo/f.txt").decode() == ORIGINAL
    assert repo.exec("git status --porcelain", cwd="/workspace/repo").stdout == ""  # no debris


def test_empty_patch(repo):
    result = repo.apply_patch("   \n")
    assert not result.success and "empty" in result.error
