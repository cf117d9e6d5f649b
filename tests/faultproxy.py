"""A TCP proxy for fault injection on loopback: put it between two servers of a cluster (a route dialled to
the proxy's port reaches the real route port) and make the link slow, silent or cut."""
import socket, threading, time


class FaultProxy:
    """Forwards every connection made to `port` to `target` (host, port), in both directions.

    `delay` holds every chunk that long before passing it on; `blackhole()` keeps the connections open but
    passes nothing and stops reading (the peer's writes pile up, its pings go unanswered); `sever()` closes
    every connection and refuses new ones (a partition); `heal()` passes traffic again."""
    def __init__(self, target: tuple[str, int], delay: float = 0.0):
        self.target, self.delay = target, delay
        self.mode = 'pass'                       # pass | blackhole | refuse | drop (count the connection, then close it)
        self.lsock = socket.create_server(('127.0.0.1', 0))
        self.port = self.lsock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.accepted = 0
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str: return f'nats-route://127.0.0.1:{self.port}'

    def _accept(self):
        while not self._stop:
            try: a, _ = self.lsock.accept()
            except OSError: return
            if self.mode == 'refuse': a.close(); continue
            if self.mode == 'drop': self.accepted += 1; a.close(); continue
            try: b = socket.create_connection(self.target, timeout=5)
            except OSError: a.close(); continue
            self.accepted += 1
            with self._lock: self.conns += [a, b]
            for src, dst in ((a, b), (b, a)): threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket):
        src.settimeout(0.05)
        while not self._stop:
            if self.mode == 'blackhole': time.sleep(0.05); continue
            try: data = src.recv(65536)
            except socket.timeout: continue
            except OSError: break
            if not data: break
            if self.delay: time.sleep(self.delay)
            while self.mode == 'blackhole' and not self._stop: time.sleep(0.05)   # held, not lost
            try: dst.sendall(data)
            except OSError: break
        for s in (src, dst):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass

    def blackhole(self): self.mode = 'blackhole'

    def sever(self):
        "Cut every connection and refuse new ones until `heal`."
        self.mode = 'refuse'
        with self._lock: conns, self.conns = self.conns, []
        for s in conns:
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
            s.close()

    def heal(self): self.mode = 'pass'

    def close(self):
        self._stop = True; self.sever(); self.lsock.close()

