"""A TCP relay on loopback that can be cut: what the tests put between a process and PostgreSQL to
take the database away (every open connection closed, new ones refused, as a restarting server does)
and give it back on the same address."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpRelay:
    """Pipes each connection accepted on ``127.0.0.1:port`` to ``target``, both ways, while it is up."""

    def __init__(self, target: tuple[str, int], port: int = 0):
        self.target = target
        self.port = port
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._stop: threading.Event | None = None
        self._accepting: threading.Thread | None = None

    def __enter__(self) -> TcpRelay:
        self.restore()
        return self

    def __exit__(self, *exc) -> None:
        self.cut()

    def restore(self) -> None:
        """Listen again (on the same port once it had one) and relay what connects."""
        listener = socket.create_server(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        self._listener, self._stop = listener, threading.Event()
        self._accepting = threading.Thread(target=self._accept, args=(listener, self._stop), daemon=True)
        self._accepting.start()

    def cut(self) -> None:
        """The database goes away: the listener closes and every relayed connection is shut."""
        if self._stop is not None:
            self._stop.set()
            self._accepting.join()  # the listener is closed: the port is free to listen on again
        with self._lock:
            for end in self._sockets:
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()
            self._sockets.clear()

    def _accept(self, listener: socket.socket, stop: threading.Event) -> None:
        listener.settimeout(0.1)
        with listener:
            while not stop.is_set():
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    client.close()
                    continue
                upstream.settimeout(None)
                with self._lock:
                    if stop.is_set():
                        client.close()
                        upstream.close()
                        return
                    self._sockets |= {client, upstream}
                for source, sink in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
