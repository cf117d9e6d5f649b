"""A raw-socket NATS client for protocol tests: send exact bytes, read exact bytes."""
import socket, time


class Raw:
    def __init__(self, port: int, connect: bytes | None = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'):
        self.s = socket.create_connection(('127.0.0.1', port), timeout=5)
        self.info = self._line()
        if connect: self.s.sendall(connect)

    def _line(self) -> bytes:
        buf = b''
        while not buf.endswith(b'\r\n'):
            d = self.s.recv(1)
            if not d: break
            buf += d
        return buf

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

    def close(self): self.s.close()
