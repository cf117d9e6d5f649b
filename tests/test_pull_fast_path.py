"""The plain path of pull delivery (a run of messages for the head request) against the message-at-a-time
path priority groups take (`next_waiting` for every message): on random workloads of pull requests,
acks, NAKs and new messages, a consumer without a priority policy must send exactly the same frames
either way."""
import random
import pytest
from jsnb.js import pull
from jsnb.js.consumer import Consumer
from jsnb.js.nullhost import NullHost
from jsnb.js.store import MemStore
from jsnb.js.stream import Stream, limits_of


def _norm(frames):
    "Frames with the message timestamp (token 7 of an ack subject) left out: the two runs store at different times."
    out = []
    for to, subject, reply, hdr, data in frames:
        if reply.startswith('$JS.ACK.'):
            t = reply.split('.'); del t[7]; reply = '.'.join(t)
        out.append((to, subject, reply, hdr, data))
    return out


def _workload(seed: int) -> list:
    "What happens, in order: ('pub', size), ('pull', inbox, body), ('ack', k, kind) on the k-th delivery so far."
    rnd, ops = random.Random(seed), []
    for _ in range(rnd.randrange(0, 40)): ops.append(('pub', rnd.choice([1, 10, 100, 300])))
    for _ in range(120):
        r = rnd.random()
        if r < 0.35:
            req = {'batch': rnd.choice([1, 2, 3, 7, 20, 100]), 'expires': 60_000_000_000}
            if rnd.random() < 0.3: req['max_bytes'] = rnd.choice([50, 200, 500, 2000])
            if rnd.random() < 0.15: req['no_wait'] = True; req.pop('expires')
            body = str(req).replace("'", '"').replace('True', 'true').encode() if rnd.random() < 0.8 else str(rnd.choice([0, 1, 5])).encode()
            ops.append(('pull', f'_INBOX.{rnd.randrange(4)}', body))
        elif r < 0.65: ops.append(('pub', rnd.choice([1, 10, 100, 300])))
        else: ops.append(('ack', rnd.randrange(1000), rnd.choice([b'+ACK', b'+ACK', b'+ACK', b'-NAK', b'+TERM'])))
    return ops


def _run(seed: int, ack_policy: str, max_ack_pending: int) -> list:
    host = NullHost(interest=lambda s: not s.startswith('$JS.EVENT'))
    cfg = dict(name='S', subjects=['s.*'], storage='memory', duplicate_window=0)
    s = Stream(host, cfg, MemStore(limits_of(cfg)))
    c = Consumer(s, 'C', dict(durable_name='C', ack_policy=ack_policy, max_ack_pending=max_ack_pending, max_waiting=512,
                              ack_wait=3_600_000_000_000, filter_subject='s.a' if seed % 3 == 0 else ''))
    s.consumers['C'] = c
    delivered, rnd = [], random.Random(seed)
    for op in _workload(seed):
        start = len(host.sent)
        if op[0] == 'pub': s.ingest_one(rnd.choice(['s.a', 's.b']), b'', b'x' * op[1])
        elif op[0] == 'pull': host.send(c.pull(op[1], op[2]))
        elif delivered:
            reply = delivered[op[1] % len(delivered)]
            t = reply.split('.')
            host.send(c.ack(int(t[5]), int(t[6]), int(t[4]), op[2]))
        delivered += [f[2] for f in host.sent[start:] if f[2].startswith('$JS.ACK.')]
    return _norm([f for f in host.sent if f[0].startswith('_INBOX.')]) + [(c.sseq, c.dseq, c.adflr, c.asflr, sorted(c.pending))]


@pytest.mark.parametrize('seed', range(40))
def test_plain_path_sends_what_next_waiting_would(seed, monkeypatch):
    ack_policy = ['explicit', 'explicit', 'none', 'all'][seed % 4]
    mx = [1000, 3, 10][seed % 3]
    fast = _run(seed, ack_policy, mx)
    monkeypatch.setattr(pull, '_serve_plain', pull._serve_groups)     # every message through `next_waiting`
    slow = _run(seed, ack_policy, mx)
    assert fast == slow
    assert sum(1 for f in fast[:-1] if f[2]) > 0                         # something was delivered
