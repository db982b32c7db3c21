"""The witness process: a root process in the verifier's sandbox, started before the tests and
stopped after them, that records what the runners' witnesses tell it over a Unix socket.

Each line received is kept with the sender's process id and user (the kernel's SO_PEERCRED, not
what the sender says) and the connection it came on, appended to a log only root can read or
write. The test runner, the code under test and whatever they start are other processes: when
they run as another user than root (Pomona's own tasks), nothing they do reaches this process or
its log; as root (official images) they could, and the verifier then relies on the checks the
witnesses make from inside and on comparing this record with the runner's printed log.

Standard library only: copied into the sandbox and run with its `python3 -I`.
"""

import json
import os
import socket
import struct
import sys
import threading
import time


def serve(sock_path: str, log_path: str) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    server.bind(sock_path)
    os.chmod(sock_path, 0o666)  # runners run as the sandbox's user
    server.listen(64)
    lock = threading.Lock()
    log = open(log_path, "a", buffering=1)
    counter = [0]

    def write(record: dict) -> None:
        with lock:
            log.write(json.dumps(record) + "\n")

    def handle(conn: socket.socket, number: int) -> None:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", creds)
        write({"conn": number, "pid": pid, "uid": uid, "event": "open", "at": time.time()})
        buf = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    event = json.loads(line)
                except ValueError:
                    event = {"event": "garbled", "bytes": len(line)}
                if not isinstance(event, dict):
                    event = {"event": "garbled", "bytes": len(line)}
                event.update({"conn": number, "peer_pid": pid, "peer_uid": uid})
                write(event)
        write({"conn": number, "pid": pid, "event": "close", "partial": len(buf)})
        conn.close()

    write({"event": "listening", "pid": os.getpid()})
    while True:
        conn, _ = server.accept()
        counter[0] += 1
        threading.Thread(target=handle, args=(conn, counter[0]), daemon=True).start()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
