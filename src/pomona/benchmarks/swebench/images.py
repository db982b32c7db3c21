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
from typing import TYPE_CHECKING

from pomona.benchmarks.swebench.instances import TASK_DIR_KEY, SweInstance, bundle_of

if TYPE_CHECKING:
    import docker


def _engine() -> docker.DockerClient | None:
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        return None
    try:
        client = docker.from_env()
        client.ping()
        return client
    except DockerException:
        return None


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
    wanted = [i for i in instances if bundle_of(i) is None]
    engine = _engine() if wanted else None
    if engine is None:
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
                engine.images.build(path=str(context), tag=image, rm=True, forcerm=True)
            except (BuildError, APIError) as e:
                why = f"building {image} failed: {e}"
        else:
            try:
                engine.images.get(image)
            except ImageNotFound:
                say(f"{image} is not in the local image store; pulling it")
                try:
                    engine.images.pull(image)
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
