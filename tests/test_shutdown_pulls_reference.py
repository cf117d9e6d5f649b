"""A server that shuts down tells the pull requests still waiting at its consumers of one replica: `409 Server
Shutdown` with what each still wanted (`Nats-Pending-Messages`, `Nats-Pending-Bytes`), once per inbox, before it
closes the connection. nats-jetstream's ordered consumer relies on it: its pull loop asks again after the restart,
hears that nobody serves the old consumer, and recreates it (`test_ordered_consumer_messages_server_restart`)."""
import json
import pytest
from conftest import KINDS, ServerProc
from rawclient import Raw

pytestmark = pytest.mark.reference
EXP = b'"expires": 60000000000'


def _api(r: Raw, subject: str, body: dict) -> dict:
    data = json.dumps(body).encode()
    r.send(b'PUB %s _INBOX.api %d\r\n%s\r\n' % (subject.encode(), len(data), data))
    return json.loads(r.msgs(1)[0].data)


def _pull(r: Raw, consumer: str, inbox: str, body: bytes):
    r.send(b'PUB $JS.API.CONSUMER.MSG.NEXT.S.%s %s %d\r\n%s\r\n' % (consumer.encode(), inbox.encode(), len(body), body))


@pytest.mark.parametrize('kind', KINDS)
def test_waiting_pull_requests_hear_of_the_shutdown(kind):
    s = ServerProc(kind, ['-js']).start()
    r = Raw(s.port)
    try:
        r.send(b'SUB _INBOX.api 1\r\nSUB in.> 2\r\nSUB push.x 3\r\n')
        assert 'error' not in _api(r, '$JS.API.STREAM.CREATE.S', {'name': 'S', 'subjects': ['s.>']})
        for name, cfg in [('P', {}), ('Q', {'max_waiting': 5}), ('M', {'mem_storage': True}), ('U', {'deliver_subject': 'push.x'})]:
            assert 'error' not in _api(r, f'$JS.API.CONSUMER.CREATE.S.{name}', {'stream_name': 'S', 'config': {
                'durable_name': name, 'ack_policy': 'explicit', **cfg}})
        r.send(b'PUB s.1 _INBOX.api 1\r\nx\r\n'); r.msgs(1)
        _pull(r, 'P', 'in.done', b'{"batch": 1, %s}' % EXP)                 # served: not waiting any more
        _pull(r, 'P', 'in.a', b'{"batch": 5, %s}' % EXP)
        _pull(r, 'P', 'in.b', b'{"batch": 2, "max_bytes": 900, %s}' % EXP)
        _pull(r, 'P', 'in.a', b'{"batch": 3, %s}' % EXP)                    # the same inbox again: told once
        _pull(r, 'Q', 'in.c', b'{"batch": 7, %s, "idle_heartbeat": 30000000000}' % EXP)     # (s.1 first)
        _pull(r, 'M', 'in.d', b'{"batch": 2, %s}' % EXP)
        _pull(r, 'U', 'in.e', b'1')                                          # a push consumer: refused at once
        before = sorted(m.subject for m in r.msgs(4))              # s.1 three times, and the push consumer's 409
        r.send(b'PING\r\n'); r.until(b'PONG')
        s.proc.send_signal(15)
        out, closed = r.read(wait=5)
        assert closed
        got = sorted(_status(out))
    finally:
        r.close(); s.stop()
    assert before == [b'in.e', b's.1', b's.1', b's.1'], before
    assert got == sorted([
        (b'in.a', b'NATS/1.0 409 Server Shutdown\r\nNats-Pending-Messages: 3\r\nNats-Pending-Bytes: 0\r\n\r\n'),
        (b'in.b', b'NATS/1.0 409 Server Shutdown\r\nNats-Pending-Messages: 2\r\nNats-Pending-Bytes: 900\r\n\r\n'),
        (b'in.c', b'NATS/1.0 409 Server Shutdown\r\nNats-Pending-Messages: 6\r\nNats-Pending-Bytes: 0\r\n\r\n'),
        (b'in.d', b'NATS/1.0 409 Server Shutdown\r\nNats-Pending-Messages: 1\r\nNats-Pending-Bytes: 0\r\n\r\n')]), (kind, got)


def _status(out: bytes) -> list[tuple[bytes, bytes]]:
    "The header-only messages in `out`: (subject, headers)."
    from jsnb.nats.protocol import ClientParser, Msg
    return [(m.subject, m.data[:m.hdr_len]) for m in ClientParser().feed(out) if type(m) is Msg and m.hdr_len and b'Server Shutdown' in m.data]
