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


def _pipe(src: socket.socket, dst: socket.socket):
    "Copy `src` to `dst` until either side closes; then close both."
    try:
        while data := src.recv(65536): dst.sendall(data)
    except OSError: pass
    for s in (src, dst):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass


class RaftTunnels:
    """The proxies jsnb servers dial their Raft peers through (`JSNB_RAFT_PROXY`): one listening port per server, so a
    link's dialler is known by the port it came in on; the first line of the link names the peer dialled (`host:port`),
    and `owner(host)` says which server that is. `isolate(i)` cuts every link between server `i` and the others and
    refuses new ones until `heal()`."""
    def __init__(self, n: int, owner):
        self.owner, self.cut = owner, set()
        self.links: list[tuple[int, int, socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self.lsocks = [socket.create_server(('127.0.0.1', 0)) for _ in range(n)]
        self.addrs = ['127.0.0.1:%d' % s.getsockname()[1] for s in self.lsocks]
        for i, ls in enumerate(self.lsocks): threading.Thread(target=self._accept, args=(i, ls), daemon=True).start()

    def _accept(self, src: int, ls: socket.socket):
        while True:
            try: a, _ = ls.accept()
            except OSError: return
            threading.Thread(target=self._link, args=(src, a), daemon=True).start()

    def _link(self, src: int, a: socket.socket):
        line = b''
        try:
            a.settimeout(5)
            while not line.endswith(b'\n'):
                if not (c := a.recv(1)) or len(line) > 300: raise OSError('no peer line')
                line += c
            host, port = line.decode().strip().rsplit(':', 1)
            dst = self.owner(host)
            if src in self.cut or dst in self.cut: raise OSError('cut')
            b = socket.create_connection((host, int(port)), timeout=5)
        except OSError: a.close(); return
        a.settimeout(None)
        with self._lock: self.links.append((src, dst, a, b))
        threading.Thread(target=_pipe, args=(b, a), daemon=True).start()
        _pipe(a, b)

    def isolate(self, i: int):
        "Cut server `i` off from every other one."
        self.cut.add(i)
        with self._lock:
            gone = [l for l in self.links if i in l[:2]]
            self.links = [l for l in self.links if i not in l[:2]]
        for _, _, a, b in gone:
            for s in (a, b):
                try: s.shutdown(socket.SHUT_RDWR)
                except OSError: pass

    def heal(self): self.cut.clear()

    def close(self):
        for i in range(len(self.lsocks)): self.isolate(i)
        for ls in self.lsocks: ls.close()
