"""A raw-socket NATS client for protocol tests: send exact bytes, read exact bytes, or read the
messages as jsnb's protocol module parses them."""
import socket, time
from jsnb.nats.protocol import ClientParser, Info, Msg, Err, Close, PING, PONG_B


class Raw:
    def __init__(self, port: int, connect: bytes | None = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'):
        self.s = socket.create_connection(('127.0.0.1', port), timeout=5)
        self.parser, self.pending = ClientParser(), []
        self.info = self._info()
        if connect: self.s.sendall(connect)

    def _info(self) -> bytes:
        "The JSON of the server's `INFO`, read a byte at a time so that nothing after it is consumed."
        while True:
            d = self.s.recv(1)
            if not d: return b''
            for op in self.parser.feed(d): return op.info if type(op) is Info else b''

    def send(self, data: bytes): self.s.sendall(data); return self

    def read(self, wait: float = 0.5) -> tuple[bytes, bool]:
        "Everything the server sends within `wait` seconds of quiet, and whether it closed."
        out = b''; self.s.settimeout(wait)
        while True:
            try: d = self.s.recv(1 << 20)
            except socket.timeout: return out, False
            except ConnectionResetError: return out, True
            if not d: return out, True
            out += d

    def until(self, marker: bytes, timeout: float = 5) -> bytes:
        "Read until `marker` has been received."
        out, end = b'', time.time() + timeout
        self.s.settimeout(0.2)
        while marker not in out and time.time() < end:
            try: d = self.s.recv(1 << 20)
            except socket.timeout: continue
            if not d: break
            out += d
        return out

    def msgs(self, n: int, timeout: float = 5) -> list[Msg]:
        "The next `n` messages (fewer if they do not come in time); `PING`s are answered, `-ERR` raises."
        end = time.time() + timeout
        self.s.settimeout(0.2)
        while len(self.pending) < n and time.time() < end:
            try: d = self.s.recv(1 << 16)
            except socket.timeout: continue
            if not d: break
            for op in self.parser.feed(d):
                if type(op) is Msg: self.pending.append(op)
                elif op is PING: self.send(PONG_B)
                elif type(op) in (Err, Close): raise AssertionError(f'server said {op}')
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def close(self): self.s.close()
