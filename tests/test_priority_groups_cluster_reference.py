"""Scenarios of `test_priority_groups_reference` (pull requests held to the end of a read and served by priority or in
turns, `no_wait`, pinned clients) on three-server clusters, against nats-server and jsnb.

Each scenario runs unchanged against a cluster of each kind, the client on the first server, its stream of one replica
(placed on any server, so that requests may reach the consumer over a route) or of three. The two clusters are started
once for the module; each scenario starts without streams.

Left out, because the clusters differ there still: `test_reset*` (the reference's reset response in a cluster carries
the consumer's `cluster`), `test_unpin` (the API counters of `$JS.API.INFO` count differently), and, with one replica,
the pending count in the ack subjects and the deliveries of `test_overflow`, `test_prioritized` and
`test_pinned_request_renews_and_wrong_pin_after_timeout`, and `test_requests_take_turns_and_batch_completed` (where the
reference, its consumer on another server, now and then passes over the first request); with three, the order of
`409 Batch Completed` and the last delivery of that scenario (the reference sends the status before the delivery it
waits to replicate). The pending count in ack subjects is blanked: the reference's, in a cluster, is now and then one
less than the messages left."""
import concurrent.futures
import pytest
import test_priority_groups_reference as P
from jsclusters import JSCluster

pytestmark = pytest.mark.reference
CASES = [('test_no_wait_waits_for_acks', 1), ('test_no_wait_waits_for_acks', 3),
         ('test_pinned_client', 3),
         ('test_overflow_min_ack_pending', 3), ('test_priority_fields_without_policy', 1),
         ('test_requests_arriving_together', 1), ('test_requests_arriving_together', 3)]


@pytest.fixture(scope='module')
def clusters():
    cs = {}
    try:
        for kind in ('nats-server', 'jsnb'):
            c = cs[kind] = JSCluster(kind); c.start(); c.wait_meta()
        yield cs
    finally:
        for c in cs.values(): c.stop()


class _T(P.T):
    def frame(self, m):
        subject, reply, hdrs, data = super().frame(m)
        if reply.startswith('$JS.ACK.'): reply = reply.rsplit('.', 1)[0] + '.<pending>'
        return subject, reply, hdrs, data


class _Server:
    def __init__(self, url): self.url = url


def _clean(c):
    if left := c.streams(): c.delete(sorted(left))


@pytest.mark.parametrize('name,replicas', CASES)
async def test_in_a_cluster(clusters, name, replicas, monkeypatch):
    monkeypatch.setattr(P, 'S', dict(P.S, num_replicas=replicas))
    monkeypatch.setattr(P, 'T', _T)
    def start(kind, *args, config=None):
        c = clusters[kind]
        with concurrent.futures.ThreadPoolExecutor(1) as ex: ex.submit(_clean, c).result()   # (its own event loop)
        return _Server(c.url(0))
    await getattr(P, name)(start)
