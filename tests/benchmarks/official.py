"""SWE-bench's own image layout, built here from a shipped local task: the repository at /testbed
on the base commit, owned by root, and a `testbed` environment holding pytest that eval scripts
activate with `source /opt/miniconda3/bin/activate; conda activate testbed`, as swebench's
images and eval scripts do. The system python3 has no pytest and there is no `python` outside
the environment, so a grade that resolves proves the environment was activated.

Stand-in, named as such: /opt/miniconda3/bin/activate is a few lines of shell defining `conda
activate NAME` (prepend the env's bin to PATH), not conda itself, which cannot be downloaded
here; the env is a Python venv. Everything else (git, the repository, pytest) is real.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from pomona.benchmarks import pytools, swebench
from pomona.benchmarks.swebench import datasets as swe_datasets
from tests.images import debian_image

ACTIVATE = """# Stand-in for conda's activate script: `conda activate NAME` puts the env first on PATH.
conda() {
  if [ "$1" = activate ]; then
    export CONDA_DEFAULT_ENV="$2" PATH="/opt/miniconda3/envs/$2/bin:$PATH"
  fi
}
"""
NODE = Path("/var/cache/pomona/tools/node/bin/node")


def context(
    ctx: Path, instance: dict[str, Any], extra: tuple[str, ...] = (), node: bool = False
) -> Path:
    """A build context (Dockerfile and files) for the official-layout image of a bundled local
    instance. The bundle is named source.bundle: a task directory holding it is not a
    Pomona host-image task."""
    (ctx / "conda" / "bin").mkdir(parents=True)
    (ctx / "conda" / "bin" / "activate").write_text(ACTIVATE)
    (ctx / "pytest.tar").write_bytes(pytools.packages_tar())
    (ctx / "source.bundle").write_bytes(swebench.bundle_of(instance).read_bytes())
    (ctx / "test.patch").write_text(instance["test_patch"])
    lines = [
        f"FROM {debian_image()}",
        "COPY conda /opt/miniconda3",
        "RUN python3 -m venv --without-pip /opt/miniconda3/envs/testbed",
        "COPY pytest.tar /tmp/pytest.tar",
        "RUN tar -C /opt/miniconda3/envs/testbed/lib/python3.11/site-packages -xf /tmp/pytest.tar"
        " && rm /tmp/pytest.tar",
        "RUN printf '#!/opt/miniconda3/envs/testbed/bin/python\\nimport sys\\nfrom pytest import"
        " console_main\\nsys.exit(console_main())\\n' > /opt/miniconda3/envs/testbed/bin/pytest"
        " && chmod +x /opt/miniconda3/envs/testbed/bin/pytest",
        "COPY source.bundle test.patch /tmp/",
        f"RUN git clone -q /tmp/source.bundle /testbed && cd /testbed && git checkout -q "
        f"{instance['base_commit']} && git remote remove origin && rm /tmp/source.bundle",
        # the repository installed in develop mode, as swebench's images `pip install -e .` it
        "RUN cd /testbed && (test -d src && echo /testbed/src || echo /testbed) >"
        " /opt/miniconda3/envs/testbed/lib/python3.11/site-packages/testbed.pth",
        "WORKDIR /testbed",
    ]
    if node:
        shutil.copy(NODE, ctx / "node")  # with its mode: executable
        lines.insert(1, "COPY node /usr/local/bin/node")
    (ctx / "Dockerfile").write_text("\n".join([*lines, *extra]) + "\n")
    return ctx


def build(
    tag: str, instance: dict[str, Any], extra: tuple[str, ...] = (), node: bool = False
) -> str:
    """The official-layout image for a bundled local instance, tagged `tag` in the engine."""
    with tempfile.TemporaryDirectory(prefix="pomona-official-") as d:
        ctx = context(Path(d), instance, extra, node)
        subprocess.run(
            ["docker", "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True
        )
    return tag


def tag(source: str, target: str) -> str:
    subprocess.run(["docker", "tag", source, target], check=True, capture_output=True)
    return target


def official_row(
    instance: dict[str, Any], image: str, test_cmd: str = swe_datasets.PYTEST
) -> dict[str, Any]:
    """The instance as a published 5.x row names it: no bundle, its image, and an eval script
    in swebench's shape (activate the env, reset and patch the tests, run them between markers)."""
    row = {
        k: v
        for k, v in instance.items()
        if k != swebench.TASK_DIR_KEY and k not in (swebench.TEST_DEPENDENCIES, swebench.TOOLCHAINS)
    }
    row["image"] = image
    row["eval_script"] = swe_datasets.four_x_script(
        instance["base_commit"], instance["test_patch"], test_cmd
    )
    return row


def smith_branch(instance: dict[str, Any], branch: str) -> tuple[str, ...]:
    """Dockerfile lines giving /testbed a SWE-smith bug branch: the bug with its tests, then a
    commit removing the tests (the branch head has the base tree; HEAD~1 has the tests)."""
    tests = " ".join(shlex.quote(t) for t in swebench.patch_files(instance["test_patch"]))
    return (
        f"RUN cd /testbed && git config user.email t@pomona.invalid && git config user.name t"
        f" && git checkout -q -b {branch} && git apply /tmp/test.patch && git add -A"
        f" && git commit -qm 'bug' && git rm -q {tests} && git commit -qm 'remove F2P tests'"
        f" && git checkout -q --detach {instance['base_commit']}",
    )


def swebench_report(log_dir: Path) -> dict[str, Any]:
    """A report.json Pomona wrote, as swebench's own functions write it: without the verdict
    Pomona adds (`pomona_verdict`, and `pomona_reason` for a spoof or a suspect run)."""
    import json

    report = json.loads((log_dir / "report.json").read_text())
    for entry in report.values():
        entry.pop("pomona_verdict", None)
        entry.pop("pomona_reason", None)
    return report
