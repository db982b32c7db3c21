"""The files API, including paths and links that try to leave the sandbox."""

from __future__ import annotations

import io
import os
import tarfile
import uuid

import pytest

from pomona.errors import FileNotFoundInSandbox, InvalidRequest, PathOutsideSandbox


def test_write_read_list_stat_remove(sandbox):
    sandbox.write_file("/workspace/dir/a.txt", b"alpha", mode=0o600)
    sandbox.write_file("dir/b.txt", "beta")  # relative to the workdir
    assert sandbox.read_file("/workspace/dir/a.txt") == b"alpha"
    assert [f.name for f in sandbox.list_files("dir")] == ["a.txt", "b.txt"]
    st = sandbox.stat("dir/a.txt")
    assert (st.type, st.size, st.mode) == ("file", 5, 0o600)
    # the sandbox user owns what the API wrote
    assert sandbox.exec("stat -c %u dir/a.txt").stdout.strip() == "1000"
    assert sandbox.exec("cat dir/b.txt").stdout == "beta"
    sandbox.remove("dir/a.txt")
    with pytest.raises(FileNotFoundInSandbox):
        sandbox.read_file("dir/a.txt")
    with pytest.raises(InvalidRequest, match="non-empty"):
        sandbox.remove("dir")
    sandbox.remove("dir", recursive=True)
    assert sandbox.exec("test -e dir").exit_code == 1


def test_binary_roundtrip(sandbox):
    data = os.urandom(300_000)
    sandbox.write_file("blob.bin", data)
    assert sandbox.read_file("blob.bin") == data
    assert sandbox.exec("wc -c < blob.bin").stdout.strip() == "300000"


def test_directory_as_tar_in_and_out(sandbox):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("pkg/__init__.py", b""), ("pkg/mod.py", b"X = 1\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("pkg/link")
        link.type, link.linkname = tarfile.SYMTYPE, "mod.py"
        tar.addfile(link)
    sandbox.upload_dir("/workspace/proj", buf.getvalue())
    assert sandbox.exec("cat proj/pkg/link").stdout == "X = 1\n"
    out = tarfile.open(fileobj=io.BytesIO(sandbox.download_dir("proj")))
    names = set(out.getnames())
    assert {"./pkg/mod.py", "./pkg/link"} <= {n if n.startswith("./") else "./" + n for n in names}
    member = next(m for m in out.getmembers() if m.name.endswith("pkg/link"))
    assert member.issym() and member.linkname == "mod.py"


def test_dotdot_paths_stay_inside(sandbox):
    sandbox.write_file("/../../../../tmp/escape.txt", b"inside")
    assert sandbox.exec("cat /tmp/escape.txt").stdout == "inside"
    assert not os.path.exists("/tmp/escape.txt") or open("/tmp/escape.txt").read() != "inside"


@pytest.fixture
def host_secret():
    path = f"/tmp/pomona-host-secret-{uuid.uuid4().hex}"
    with open(path, "w") as f:
        f.write("HOST-SECRET")
    yield path
    os.unlink(path)


def test_planted_symlink_cannot_read_or_write_host_files(sandbox, host_secret):
    sandbox.exec(f"ln -s {host_secret} /workspace/link; ln -s / /workspace/rootlink")
    for path in ("/workspace/link", f"/workspace/rootlink{host_secret}"):
        with pytest.raises((FileNotFoundInSandbox, PathOutsideSandbox)):
            sandbox.read_file(path)
    sandbox.write_file("/workspace/link", b"written through link")
    assert open(host_secret).read() == "HOST-SECRET"


def test_tar_upload_cannot_escape(sandbox, host_secret):
    def tar_of(*members):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    with pytest.raises(PathOutsideSandbox):
        sandbox.upload_dir("/workspace", tar_of(("../../../../tmp/evil", b"x")))
    sandbox.exec("mkdir -p /workspace/up && ln -s /tmp /workspace/up/hostdir")
    with pytest.raises(PathOutsideSandbox):
        sandbox.upload_dir(
            "/workspace/up", tar_of((f"hostdir/{os.path.basename(host_secret)}", b"x"))
        )
    assert open(host_secret).read() == "HOST-SECRET"


def test_read_only_host_mount(client, image, tmp_path):
    from pomona.orchestrator.types import Mount

    (tmp_path / "tool").write_text("#!/bin/sh\necho from-the-payload\n")
    (tmp_path / "tool").chmod(0o755)
    tmp_path.chmod(0o755)
    with client.create_sandbox(
        image, mounts=[Mount(source=str(tmp_path), target="/opt/pomona/tools")]
    ) as sb:
        assert sb.exec("/opt/pomona/tools/tool").stdout == "from-the-payload\n"
        assert sb.exec("touch /opt/pomona/tools/x", user="root").exit_code != 0
    assert not (tmp_path / "x").exists()
