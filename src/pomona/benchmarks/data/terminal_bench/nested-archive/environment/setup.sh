#!/bin/bash
set -e
python3 - <<'PY'
import io, tarfile, zipfile, random
random.seed(3)

def tgz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name); info.size = len(data); info.mtime = 0
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()

def zipped(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()

inner = tgz({"notes/flag.txt": b"pomona-7f3a9c\n", "notes/readme.md": b"nothing here\n"})
middle = zipped({"level2/inner.tar.gz": inner, "level2/decoy.txt": b"flag is not here\n"})
outer = tgz({"level1/middle.zip": middle, "level1/other.tar.gz": tgz({"x.txt": b"x\n"})})
open("delivery.tar.gz", "wb").write(outer)
PY
