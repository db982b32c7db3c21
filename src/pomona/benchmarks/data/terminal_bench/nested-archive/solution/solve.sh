#!/bin/bash
set -e
cd /app
python3 - <<'PY'
import io, tarfile, zipfile

def walk(name, data):
    if name.endswith(".tar.gz"):
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            for m in t.getmembers():
                if m.isfile():
                    yield from walk(m.name, t.extractfile(m).read())
    elif name.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for n in z.namelist():
                yield from walk(n, z.read(n))
    elif name.rsplit("/", 1)[-1] == "flag.txt":
        yield data

flag = next(walk("delivery.tar.gz", open("delivery.tar.gz", "rb").read()))
open("answer.txt", "wb").write(flag)
PY
