"""A Jepsen-style fault suite: the same faults done to a 3-server jsnb cluster and to a 3-server nats-server 2.15.1
cluster (R3 file streams on loopback), with stock nats-py clients publishing with message ids at a steady rate and
recording every acknowledgement. Every link between two servers goes through a fault proxy (`faultproxy.py`): the
routes, which carry the Raft traffic too on both servers, so cutting them partitions the cluster for both alike.

Scenarios (`faultscenarios.py`): kill -9 of the stream leader; SIGSTOP of the leader for some seconds, then SIGCONT;
a follower whose store directory is wiped while it is stopped; a rolling restart (SIGTERM each server in turn, waiting
for `/healthz` between); the leader cut off from the other two by a network partition; KV compare-and-set under
leader kills; a consumer acknowledging with AckSync across leader changes; per-message TTLs and delete markers across
a follower's restart; SIGTERM of the leader.

Figures per scenario and server: rounds, acknowledged, lost (acknowledged, not stored), duplicated, misplaced
(acknowledged at a sequence that holds another message), divergent (replicas that disagree after quiet, compared by
content: on jsnb a digest of every message of each server's own store, read from a copy of it on disk, which no
client can reach; on nats-server its own per-server `/jsz?accounts=true&streams=true` figures), redelivered-after-ack,
undelivered, recovery time (fault to the first acknowledged publish) and failed publish attempts. Assertions are
clock-independent; times are printed only.

The default run is small: one round of each scenario on jsnb (seconds each), checked for nothing lost, duplicated,
misplaced or divergent, and the figures printed (`-s`); the SIGTERM handover is compared with nats-server's in the
same run. The open findings of issue 41 are strict expected failures with the finding named, so that they turn into
failures (to be unmarked) once fixed. The long version, every scenario on both servers:
`JSNB_FAULT_ROUNDS=20 pytest -m soak -n 0 -s tests/test_faults.py` (20 rounds unless the variable says)."""
import os, shutil
import pytest
from jsclusters import JSCluster
from faultrig import Rig, Figures, table, disagreeing
from faultscenarios import SCENARIOS, run, check

pytestmark = pytest.mark.reference
KINDS = ['nats-server', 'jsnb']
RESULTS: list[Figures] = []
SOAK_ROUNDS = int(os.environ.get('JSNB_FAULT_ROUNDS', '20'))      # rounds of every scenario in the soak

KNOWN: dict = {}             # open findings of issue 41, (server, scenario) -> why: expected failures in the soak (none now)
CLEAN = [s for s in SCENARIOS if s not in ('consumer', 'sigterm')]     # the scenarios of `test_fault` (sigterm has its own test)


class Clusters:
    """The module's clusters: `get(kind)` gives a running 3-server cluster of `kind`, every link between two servers
    through a fault proxy, the same one for every test that asks for it; it stops any other first, so that one cluster
    runs at a time and the figures of one are not those of a machine busy with another."""
    def __init__(self): self.key, self.rig = None, None

    def get(self, kind: str) -> Rig:
        if self.key != kind:
            self.close()
            c = JSCluster(kind, partitions=True)
            self.key, self.rig = kind, Rig(c)
            try: c.start(); c.wait_meta(120)
            except BaseException: self.close(); raise
        return self.rig

    def close(self):
        if self.rig is not None: self.rig.c.stop(); shutil.rmtree(self.rig.c.root, ignore_errors=True)
        self.key, self.rig = None, None


@pytest.fixture(scope='module')
def clusters():
    reg = Clusters()
    yield reg
    reg.close()


@pytest.fixture(scope='module', params=KINDS)
def kind(request):
    "The server of a soak scenario (module-wide, so that the tests of one kind run together on its cluster)."
    return request.param


@pytest.fixture(scope='module', autouse=True)
def _print_table():
    "At the end of the module, the figures of every scenario run, as a table (shown with -s)."
    yield
    if RESULTS: print('\n' + table(sorted(RESULTS, key=lambda f: (f.scenario, f.kind))))
    for f in RESULTS:
        for n in f.notes: print(f'{f.scenario} {f.kind}: {n}')


async def _scenario(rig: Rig, scenario: str, rounds: int, soak: bool = False) -> Figures:
    fig = await run(scenario, rig, rounds, soak)
    RESULTS.append(fig)
    print('\n' + table([fig]))
    for n in fig.notes: print(n)
    return fig


class RedeliveredAfterAck(AssertionError): "A message delivered again after its AckSync was confirmed (finding 2)."
class SlowHandover(AssertionError): "More probes failed across a SIGTERM of the leader than on the reference (finding 3)."


def _clean(fig: Figures):
    "Nothing acknowledged lost, misplaced or duplicated; the replicas the same; every fault recovered; no redelivery after a confirmed ack."
    s = fig.summary()
    assert (s['lost'], s['dup'], s['misseq'], s['divergent']) == (0, 0, 0, 0), (s, fig.notes)
    assert fig.undelivered in (None, 0), (s, fig.notes)
    assert s['unrecovered'] == 0 and fig.extra.get('minority_acks', 0) == 0, (s, fig.notes)
    assert fig.acked > 0
    if fig.redelivered: raise RedeliveredAfterAck((s, fig.notes))


def test_the_checks_count_each_anomaly():
    "The checks themselves, on made-up stores: an id not stored, one at another sequence, one twice; replicas apart."
    fig = Figures('x', 'y')
    stored = [(1, 's', 'a', b''), (2, 's', 'b', b''), (3, 's', 'b', b''), (4, 's', None, b''), (5, 's', 'd', b'')]
    check(fig, {'a': 1, 'b': 2, 'c': 3, 'd': 4}, stored)
    assert (fig.lost, fig.misplaced, fig.duplicated) == ({'c'}, {'d'}, {'b'})
    same, other = {'messages': 5, 'last_seq': 5}, {'messages': 5, 'last_seq': 4}
    assert [disagreeing(s) for s in ([same, same, same], [same, other, same], [same, None, other], [None, None, None])] == [0, 1, 2, 3]


async def _handover(kind: str, clusters, rounds: int, soak: bool = False):
    """The SIGTERM scenario. On nats-server: clean. On jsnb: clean, and at most three more failed probes per round than
    the reference's in the same run (nats-server's figures from this run, or from its cluster started for them): a
    count of probes compared with the reference's, not a time."""
    ref = next((f for f in RESULTS if f.kind == 'nats-server' and f.scenario == 'sigterm' and f.rounds == rounds), None)
    if kind == 'jsnb' and ref is None: ref = await _scenario(clusters.get('nats-server'), 'sigterm', rounds, soak)
    fig = await _scenario(clusters.get(kind), 'sigterm', rounds, soak)
    _clean(fig)
    if kind == 'jsnb' and fig.failed > ref.failed + 3 * fig.rounds: raise SlowHandover((ref.summary(), fig.summary()))


# the default run: one round of each scenario on jsnb -----------------------------------------------------------------
async def test_sigterm_hands_over(clusters):
    """SIGTERM of the stream leader while a client of the other two servers sends probes: a leader that transfers
    leadership on the way out leaves (almost) no probe unacknowledged; one that just leaves makes the others wait for
    an election, and the probes sent meanwhile fail. jsnb is compared with nats-server's count in the same run."""
    await _handover('jsnb', clusters, 1)


@pytest.mark.parametrize('scenario', CLEAN)
async def test_fault(scenario, clusters):
    "One round of the scenario on jsnb: nothing acknowledged lost or duplicated, the replicas the same after quiet."
    _clean(await _scenario(clusters.get('jsnb'), scenario, 1))


async def test_acksync_not_redelivered(clusters):
    """One round of the consumer scenario on jsnb: a message whose AckSync was confirmed is never delivered again,
    across a consumer-leader stepdown (the client holding a fetched batch) and a kill -9 of the consumer's leader. Every
    stepdown is carried out while the publishers run (a leader hands over once a follower caught up: none refused)."""
    fig = await _scenario(clusters.get('jsnb'), 'consumer', 1)
    _clean(fig)
    assert not [n for n in fig.notes if 'stepdown' in n or 'never moved' in n], fig.notes


# the soak: every scenario on both servers, JSNB_FAULT_ROUNDS rounds ---------------------------------------------------
def _known(request, kind: str, scenario: str):
    "In the soak, an open finding of issue 41 on this server is an expected failure (strict in the default run)."
    if why := KNOWN.get((kind, scenario)):
        request.applymarker(pytest.mark.xfail(strict=False, raises=RedeliveredAfterAck, reason=why))


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)
@pytest.mark.parametrize('scenario', [s for s in SCENARIOS if s != 'sigterm'])
async def test_fault_soak(kind, scenario, clusters, request):
    "`SOAK_ROUNDS` rounds of every scenario on both servers; the table is printed at the end of the module (-s)."
    _known(request, kind, scenario)
    _clean(await _scenario(clusters.get(kind), scenario, SOAK_ROUNDS, soak=True))


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)
async def test_sigterm_soak(kind, clusters, request):
    _known(request, kind, 'sigterm')
    await _handover(kind, clusters, SOAK_ROUNDS, soak=True)
