"""The floor of the job file figure: a bare epoll + ``os.sendfile`` loop,
as a process of its own:

    python -m bench.bare FILE       (prints "PORT <n>" once it listens)

It answers every request on a connection (HTTP/1.1, kept alive) with the
whole of FILE: it reads up to the blank line that ends the request and
parses nothing else (no method, path, Range or header is looked at), opens
FILE, writes a three-line head and sends the body with ``sendfile`` from
the page cache, as much as the socket takes each time it is writable. No
framework, no logging, no limits: the CPU a request costs here is what the
kernel takes to move the bytes plus the least Python can add, which is what
bench/files.py measures netweir-serve's job files against.

Stdlib only, bound to 127.0.0.1 on a free port; it stops when its standard
input closes, so it never outlives the benchmark that started it.
"""

import os
import select
import socket
import sys

HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n"


class Connection:
    def __init__(self, sock):
        self.sock = sock
        self.asked = b""
        self.file = None
        self.offset = 0
        self.left = 0


def serve(path, listener, stop_fd):
    poll = select.epoll()
    poll.register(listener.fileno(), select.EPOLLIN)
    poll.register(stop_fd, select.EPOLLIN)
    connections = {}

    def close(fd):
        c = connections.pop(fd)
        poll.unregister(fd)
        if c.file is not None:
            os.close(c.file)
        c.sock.close()

    def send(fd, c):
        """Sends until the socket is full or the body is out; True when
        the answer is complete."""
        while c.left:
            try:
                count = os.sendfile(fd, c.file, c.offset, c.left)
            except BlockingIOError:
                return False
            if not count:
                raise OSError("the file shrank")
            c.offset += count
            c.left -= count
        os.close(c.file)
        c.file = None
        return True

    while True:
        for fd, events in poll.poll():
            if fd == stop_fd:
                return
            if fd == listener.fileno():
                while True:
                    try:
                        sock, _ = listener.accept()
                    except BlockingIOError:
                        break
                    sock.setblocking(False)
                    connections[sock.fileno()] = Connection(sock)
                    poll.register(sock.fileno(), select.EPOLLIN)
                continue
            c = connections.get(fd)
            if c is None:
                continue
            try:
                if c.file is not None:
                    if send(fd, c):
                        poll.modify(fd, select.EPOLLIN)
                    continue
                data = c.sock.recv(65536)
                if not data:
                    close(fd)
                    continue
                c.asked += data
                if b"\r\n\r\n" not in c.asked:
                    continue
                c.asked = c.asked.split(b"\r\n\r\n", 1)[1]
                c.file = os.open(path, os.O_RDONLY)
                c.offset, c.left = 0, os.fstat(c.file).st_size
                c.sock.send(HEAD.format(c.left).encode("ascii"))
                if not send(fd, c):
                    poll.modify(fd, select.EPOLLOUT)
            except OSError:
                close(fd)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m bench.bare FILE\n")
        return 2
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    listener.setblocking(False)
    sys.stdout.write(f"PORT {listener.getsockname()[1]}\n")
    sys.stdout.flush()
    serve(argv[0], listener, sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
