"""The Linux mechanisms the local runtime is built from: syscalls, cgroups, network namespaces,
safe file access inside a root, OCI image layers."""
