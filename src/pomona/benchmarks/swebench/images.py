"""The images SWE-bench instances run on, found or made before grading starts.

An instance names its image as swebench's TestSpec does (`swebench/sweb.eval.x86_64.<id>:latest`,
`__` spelled `_1776_`). For each one: the local Docker engine's store first (the local runtime
reads it from there too), then a pull from its registry, and with `build` a build from the task
repo's own Dockerfile (its task directory is the build context, as `swebench dataset build` and
`run_evaluation --task-repo` use it). Building uses the engine's classic builder, so it works
without buildx; like any Dockerfile it needs whatever network its FROM and RUN lines need.
Instances on the host image (Pomona's bundled local tasks) need no image.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from pomona.benchmarks.swebench.instances import TASK_DIR_KEY, SweInstance, bundle_of
from pomona.benchmarks.verification.images import engine, engine_digest, files_digest


def dockerfile_dir(instance: SweInstance) -> Path | None:
    task_dir = instance.get(TASK_DIR_KEY)
    path = Path(task_dir) if task_dir else None
    return path if path is not None and (path / "Dockerfile").is_file() else None


def ensure(
    instances: Iterable[SweInstance],
    build: bool = False,
    say: Callable[[str], object] | None = None,
) -> dict[str, str]:
    """Make every instance's image available; return instance id -> why its image is not.
    Without a Docker engine nothing is checked here: the local runtime then looks in its own
    cache and in registries when the sandbox is created."""
    say = say or (lambda text: print(text, file=sys.stderr))
    wanted = [i for i in instances if bundle_of(i) is None and i["image"] != "host"]
    store = engine() if wanted else None
    if store is None:
        if build and wanted:
            return {i["instance_id"]: "--build-images needs a Docker engine" for i in wanted}
        return {}
    from docker.errors import APIError, BuildError, ImageNotFound

    missing: dict[str, str] = {}
    done: dict[str, str | None] = {}
    for inst in wanted:
        image, iid = inst["image"], inst["instance_id"]
        if image in done:
            if reason := done[image]:
                missing[iid] = reason
            continue
        context = dockerfile_dir(inst)
        why = None
        if build and context is not None:
            say(f"building {image} from {context / 'Dockerfile'}")
            try:
                store.images.build(path=str(context), tag=image, rm=True, forcerm=True)
            except (BuildError, APIError) as e:
                why = f"building {image} failed: {e}"
        else:
            try:
                store.images.get(image)
            except ImageNotFound:
                say(f"{image} is not in the local image store; pulling it")
                try:
                    store.images.pull(image)
                except (ImageNotFound, APIError) as e:
                    hint = (
                        " (pass --build-images to build it from the task repo)"
                        if context is not None
                        else ""
                    )
                    why = f"image {image} is neither local nor pullable: {e}{hint}"
        done[image] = why
        if why:
            missing[iid] = why
    return missing


def digest_of(instance: SweInstance) -> str | None:
    """What the instance's environment was, as a digest: the repo bundle's for a host-image
    task, else the local engine's image id; None when neither can tell."""
    bundle = bundle_of(instance)
    if bundle is not None:
        return files_digest(bundle)
    return engine_digest(instance["image"])
