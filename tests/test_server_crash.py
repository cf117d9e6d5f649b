"""A server killed with SIGKILL under publish load keeps every message it acknowledged.

The server runs with `jetstream { sync_interval: always }`. A publisher in its own process sends
with acknowledgements as fast as it can and prints each acknowledged sequence; after about a second
of load the server process gets SIGKILL, a new server starts on the same port and store directory,
and every acknowledged sequence must be there with its payload, with no gaps below the highest one."""
import asyncio, re, signal, subprocess, sys, textwrap, time
import pytest
import nats
from conftest import ServerProc

CONFIG = 'jetstream { sync_interval: always }\n'

PUBLISHER = textwrap.dedent('''
    import asyncio, os, sys
    import nats

    async def main(url, workers=32):
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2)
        js = nc.jetstream(timeout=2)
        counter = iter(range(10**9))
        async def worker():
            while True:
                i = next(counter)
                ack = await js.publish('crash.%d' % (i % 7), b'payload-%d' % i)
                sys.stdout.write('%d %d\\n' % (ack.seq, i)); sys.stdout.flush()
        try: await asyncio.gather(*[worker() for _ in range(workers)])
        except BaseException as e: sys.stderr.write('publisher stopped: %r\\n' % e)
        os._exit(0)

    asyncio.run(main(sys.argv[1]))
''')


def start_or_fail(kind, workdir=None, port=None, restart=False):
    s = ServerProc(kind, ['-js'], CONFIG, workdir=workdir)
    try: return s.start(port)
    except RuntimeError as e:
        if restart: pytest.fail(f'{kind} did not restart on the store it left behind when killed: {e}')
        pytest.fail(f'{kind} did not start with the config {CONFIG.strip()!r} '
                    f'(is `sync_interval: always` accepted in the jetstream block?): {e}')


async def read_all(url):
    "Every message of the stream `CRASH` as {seq: data}, through a pull consumer without acks."
    nc = await nats.connect(url); js = nc.jetstream()
    info = await js.stream_info('CRASH')
    psub = await js.pull_subscribe('crash.>', stream='CRASH', config=nats.js.api.ConsumerConfig(ack_policy='none'))
    got = {}
    while len(got) < info.state.messages:
        for m in await psub.fetch(2000, timeout=5): got[m.metadata.sequence.stream] = m.data
    await nc.close()
    return info, got


@pytest.mark.parametrize('kind', ['jsnb', pytest.param('nats-server', marks=pytest.mark.reference)])
async def test_sigkill_under_load_keeps_acknowledged(kind, tmp_path):
    s = start_or_fail(kind, workdir=str(tmp_path))
    s2 = pub = None
    try:
        nc = await nats.connect(s.url); js = nc.jetstream()
        await js.add_stream(name='CRASH', subjects=['crash.>'], storage='file')
        await nc.close()

        script = tmp_path / 'publisher.py'; script.write_text(PUBLISHER)
        out = open(tmp_path / 'acks.txt', 'wb')
        pub = subprocess.Popen([sys.executable, '-u', str(script), s.url], stdout=out, stderr=subprocess.PIPE)
        end = time.time() + 10                        # load starts when the first ack is printed
        while time.time() < end and (tmp_path / 'acks.txt').stat().st_size == 0 and pub.poll() is None:
            await asyncio.sleep(0.02)
        assert (tmp_path / 'acks.txt').stat().st_size > 0, f'no acknowledgement within 10 s: {pub.stderr.read() if pub.poll() is not None else ""}'
        await asyncio.sleep(1.0)
        s.proc.send_signal(signal.SIGKILL); s.proc.wait(5)
        try: pub.wait(10)
        except subprocess.TimeoutExpired: pub.kill(); pub.wait()
        out.close()

        acks = {}
        for line in (tmp_path / 'acks.txt').read_text().splitlines():
            if re.fullmatch(r'\d+ \d+', line):
                seq, i = map(int, line.split()); acks[seq] = b'payload-%d' % i
        assert len(acks) > 10, f'too little load before the kill: {len(acks)} acks'
        top = max(acks)

        s2 = start_or_fail(kind, workdir=str(tmp_path), port=s.port, restart=True)   # same port, same store directory
        info, got = await read_all(s2.url)
        print(f'{kind}: {len(acks)} acknowledged, highest {top}, {info.state.messages} stored after the restart')
        missing = sorted(set(acks) - set(got))
        assert not missing, f'{kind}: {len(missing)} of {len(acks)} acknowledged messages lost after SIGKILL, e.g. {missing[:10]}'
        wrong = [q for q in acks if got[q] != acks[q]]
        assert not wrong, f'{kind}: wrong payloads for acknowledged sequences {wrong[:10]}: ' + \
                          ', '.join(f'{q}: {got[q]!r} != {acks[q]!r}' for q in wrong[:3])
        gaps = [q for q in range(1, top + 1) if q not in got]
        assert not gaps, f'{kind}: gaps below the highest acknowledged sequence {top}: {gaps[:10]}'
        assert info.state.first_seq == 1 and info.state.last_seq >= top and info.state.num_deleted in (0, None), info.state
        assert info.state.messages == info.state.last_seq, info.state
        payloads = [got[q] for q in sorted(got)]
        assert all(re.fullmatch(rb'payload-\d+', p) for p in payloads), 'a stored message with a torn payload'
        assert len(set(payloads)) == len(payloads), 'a payload stored twice'

        # the recovered store keeps working: a new publish goes right after the recovered tail
        nc = await nats.connect(s2.url); js = nc.jetstream()
        ack = await js.publish('crash.after', b'after restart')
        assert ack.seq == info.state.last_seq + 1
        await nc.close()
    finally:
        if pub and pub.poll() is None: pub.kill(); pub.wait()
        if pub and pub.stderr: pub.stderr.close()
        s.stop()
        if s2: s2.stop()
