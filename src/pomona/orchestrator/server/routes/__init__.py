"""The service's routes, one router per domain; app.py mounts them.

- `probes`: the open root and health routes;
- `sandboxes`: create, find, wait for, keep alive and delete sandboxes; resources and reaping;
- `jobs`: exec (waiting, streaming or as a job), jobs, apply_patch;
- `files`: files and directories of a sandbox (JSON, raw bytes, tar);
- `snapshots`: snapshot, fork, list and delete snapshots;
- `sessions`: the WebSocket sessions (a terminal, a TCP tunnel to a port).
"""
