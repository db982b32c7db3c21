"""The API server as the kubernetes runtime talks to it: the official client's APIs, one `call`
that runs a blocking request off the loop and turns the server's refusals into Pomona's errors,
and the owner label that selects this runtime's objects among everyone's in the namespace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Callable
from typing import Any

from pomona.errors import InvalidRequest, RuntimeUnavailable, SandboxConflict, SandboxFailed
from pomona.orchestrator.runtimes.kubernetes import objects


class Cluster:
    """One namespace of one cluster, seen by one owner. `core` serves requests and
    `stream_core`, on an ApiClient of its own, the exec and port-forward streams (opened one at
    a time under `stream_lock`): the client's stream() swaps its ApiClient's transport while it
    connects, so sharing one would send concurrent requests down a WebSocket."""

    def __init__(
        self, api: Any, kubeconfig: str | None, context: str | None, namespace: str, owner: str
    ):
        try:
            from kubernetes import client, config
            from kubernetes.client.rest import ApiException
        except ImportError as e:
            raise RuntimeUnavailable(
                "the kubernetes runtime needs the official client: pip install 'pomona[kubernetes]'"
            ) from e
        if api is None:
            try:
                if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
                    config.load_incluster_config()
                else:
                    config.load_kube_config(config_file=kubeconfig, context=context)
            except Exception as e:  # the client raises ConfigException, FileNotFoundError, ...
                raise RuntimeUnavailable(
                    f"no Kubernetes cluster configured: {e}. Point KUBECONFIG at a cluster's "
                    "kubeconfig (kind, k3s, a managed cluster) or run inside a pod with a service "
                    "account; docs/kubernetes.md walks through it"
                ) from None
            api = client.ApiClient()
        self.namespace, self.owner = namespace, owner
        self.core = client.CoreV1Api(api)
        self.stream_core = client.CoreV1Api(client.ApiClient(api.configuration))
        self.custom = client.CustomObjectsApi(api)
        self.networking = client.NetworkingV1Api(api)
        self.stream_lock = threading.Lock()
        self._refused = ApiException

    def selector(self, **extra: str) -> str:
        """A label selector for this owner's objects, narrowed by `extra`."""
        return ",".join(f"{k}={v}" for k, v in {objects.OWNER_LABEL: self.owner, **extra}.items())

    async def call(
        self, fn: Callable[..., Any], *args: Any, missing_ok: bool = False, **kwargs: Any
    ) -> Any:
        """A blocking client call off the loop; 404 is None when missing_ok; RBAC refusals and
        an unreachable API server become RuntimeUnavailable saying which."""
        import urllib3

        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise RuntimeUnavailable(f"the API server is unreachable: {e}") from None
        except self._refused as e:
            if e.status == 404 and missing_ok:
                return None
            if e.status in (401, 403):
                raise RuntimeUnavailable(
                    f"the cluster refused {fn.__name__} in namespace {self.namespace!r} "
                    f"({e.status} {e.reason}): the orchestrator's Role must allow it "
                    "(pomona deploy render writes one)"
                ) from None
            if e.status == 409:
                raise SandboxConflict(f"{fn.__name__}: {_reason(e)}") from None
            if e.status == 422 or e.status == 400:
                raise InvalidRequest(
                    f"the API server refused {fn.__name__}: {_reason(e)}"
                ) from None
            if e.status == 0 or e.status >= 500:
                raise RuntimeUnavailable(
                    f"the API server is unreachable or failing: {_reason(e)}"
                ) from None
            raise SandboxFailed(f"{fn.__name__}: {_reason(e)}") from None

    async def delete_policy(self, name: str) -> Any:
        """Remove a NetworkPolicy, if it is still there (None if it was not)."""
        return await self.call(
            self.networking.delete_namespaced_network_policy, name, self.namespace, missing_ok=True
        )

    def close(self) -> None:
        for api in (self.core, self.stream_core):
            with contextlib.suppress(Exception):
                api.api_client.close()


def _reason(error: Any) -> str:
    with contextlib.suppress(Exception):
        return json.loads(error.body).get("message") or str(error.reason)
    return str(getattr(error, "reason", error))
