"""An idle server is lean: with JetStream on and nothing stored, jsnb stays under 100 MB of resident memory
(the reference's figure is printed beside it) and has not loaded numba, which only a large stream needs."""
import time
from conftest import ServerProc


def rss_mb(pid: int) -> float:
    for line in open(f'/proc/{pid}/status'):
        if line.startswith('VmRSS:'): return int(line.split()[1]) / 1024
    return float('nan')


def test_idle_server_memory():
    figures = {}
    for kind in ('nats-server', 'jsnb'):
        s = ServerProc(kind, ['-js']).start()
        try:
            time.sleep(2.0)                                   # past any start-up work
            figures[kind] = rss_mb(s.proc.pid)
            if kind == 'jsnb':
                maps = open(f'/proc/{s.proc.pid}/maps').read()
                assert 'llvmlite' not in maps and 'numba' not in maps, 'numba was loaded by an idle server'
        finally: s.stop()
    print(f"idle RSS with JetStream: nats-server {figures['nats-server']:.0f} MB, jsnb {figures['jsnb']:.0f} MB")
    assert figures['jsnb'] <= 100, figures
