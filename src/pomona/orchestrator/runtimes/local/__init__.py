"""The embedded runtime: namespaces, idmapped overlay layers and cgroups, no daemon.

A sandbox is a directory in the state store (its overlay upper layer, a record.json) and one
long-lived init (pomona-init: linux/init.c), the pid 1 of new user, pid, mount, ipc, uts (and
net) namespaces, which built the sandbox's root filesystem inside its own mount namespace and
reaps orphans. Its user namespace maps ids 0-65535 to a host id range of its own
(linux/idranges.py), so root inside is nobody outside. Exec enters those namespaces through
pomona-enter (linux/enter.c) and joins the sandbox's cgroup before it can fork; files are read
and written from the host through a copy of the root mount the init holds, with in-root path
resolution. Snapshot copies the upper layer into an immutable layer; fork stacks that layer under
a fresh upper: O(1), nothing is copied.

The modules, one concept each: store (the state directory, mounted once for every process that
shares it), records (a sandbox as stored and as held), build (its layer, its init, its
teardown), enter (commands into it), snapshots, runtime (LocalRuntime, the contract), and
rootless (the runtime for an ordinary user: the user's own user namespace and a worker in it).
"""

from pomona.orchestrator.runtimes.local.runtime import LocalRuntime

__all__ = ["LocalRuntime"]
