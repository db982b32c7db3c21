"""The relay Pomona runs inside a task's sandbox (as root, with the sandbox's own python3: this
file imports nothing but the standard library) so that the agent reaches the task's sidecar
services at `<name>:<port>`, as on a compose network.

    python3 relay.py ADDRESS:PORT [ADDRESS:PORT ...]

It listens on each service address (a loopback address of the service's own, named in
/etc/hosts) and on a control port it picks and announces ("ready PORT" on stdout). Pomona keeps
a few channels open to the control port through the sandbox API; for each connection the agent
makes, the relay takes one channel, writes the address and port it came to as one line, and
then joins the two until either side closes. Pomona joins the channel's other end to the
service's own sandbox.
"""

import contextlib
import queue
import socket
import sys
import threading

channels: "queue.Queue[socket.socket]" = queue.Queue()


def listen(address: str, port: int) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(128)
    return server


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for s in (source, sink):  # one side is done: so is the connection
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


def join(client: socket.socket, route: str) -> None:
    while True:
        channel = channels.get()
        try:
            channel.sendall(route.encode() + b"\n")
            break
        except OSError:  # a channel Pomona has let go of: take the next
            channel.close()
    threading.Thread(target=pump, args=(channel, client), daemon=True).start()
    pump(client, channel)


def serve(server: socket.socket, route: str) -> None:
    while True:
        client, _ = server.accept()
        threading.Thread(target=join, args=(client, route), daemon=True).start()


def take_channels(control: socket.socket) -> None:
    while True:
        channel, _ = control.accept()
        channels.put(channel)


def main() -> None:
    routes = sys.argv[1:]
    servers = [(listen(r.rsplit(":", 1)[0], int(r.rsplit(":", 1)[1])), r) for r in routes]
    control = listen("127.0.0.1", 0)
    threads = [threading.Thread(target=take_channels, args=(control,), daemon=True)]
    threads += [threading.Thread(target=serve, args=s, daemon=True) for s in servers]
    for t in threads:
        t.start()
    print(f"ready {control.getsockname()[1]}", flush=True)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
