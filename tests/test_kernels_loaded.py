"""A server whose kernels are loaded compiles none while it serves. A kernel called with argument types its warm-up did
not use is compiled there and then, on the event loop: the loop stood still for seconds, and in a cluster its Raft groups
elected other leaders meanwhile (publishes in flight were lost with the old leader). The workload runs in a process of
its own, so that what other tests compiled before cannot hide what it would compile."""
import json, os, subprocess, sys, textwrap
import pytest
from jsnb.js import kernels

pytestmark = pytest.mark.skipif(not kernels.WANTED, reason='the kernels are off (numba missing, or JSNB_NO_JIT set)')

WORKLOAD = textwrap.dedent('''
    import asyncio, json, sys, tempfile
    import nats
    from jsnb.js import kernels, archive
    from jsnb.app import serve
    from jsnb.clients import backup

    async def work(url):
        nc = await nats.connect(url); js = nc.jetstream()
        for storage in ('file', 'memory'):
            name = f'W{storage}'
            await js.add_stream(name=name, subjects=[f'w.{storage}.>'], storage=storage, allow_direct=True)
            for i in range(100): await js.publish(f'w.{storage}.{i % 7}', b'x' * (i % 50), headers={'H': 'v'} if i % 3 else None)
            await asyncio.gather(*[await js.publish_async(f'w.{storage}.{i % 5}', b'y' * 10) for i in range(500)])
            sub = await js.pull_subscribe(f'w.{storage}.>', f'd{storage}')
            for m in await sub.fetch(100): await m.ack()
            await js.get_msg(name, seq=5, direct=True); await js.get_msg(name, subject=f'w.{storage}.3', direct=True)
            await nc.request(f'$JS.API.DIRECT.GET.{name}', json.dumps({'seq': 1, 'batch': 50}).encode())
            await nc.request(f'$JS.API.DIRECT.GET.{name}', json.dumps({'multi_last': [f'w.{storage}.>'], 'batch': 50}).encode())
            await js.purge_stream(name, subject=f'w.{storage}.3')
        kv = await js.create_key_value(bucket='KV'); await kv.put('a', b'1'); await kv.get('a')
        with tempfile.TemporaryDirectory() as b:                        # a backup, and the stream restored from it
            await backup.snapshot(nc, 'Wfile', b + '/w', check=True)
            await js.delete_stream('Wfile'); await backup.restore(nc, b + '/w')
        await nc.close()

    def forms(): return {**kernels.compiled_forms(), **archive.compiled_forms()}

    async def main():
        kernels.warm(); archive.warm()
        with tempfile.TemporaryDirectory() as d:
            s = await serve(jetstream=True, store_dir=d, port=-1)
            before = forms()                                          # (the server's modules loaded, their kernels with them)
            assert sum(k.startswith('jsnb.js.archive.') for k in before) == 5 and len(before) > 20, before
            await work(s.url); await s.stop()
            s = await serve(jetstream=True, store_dir=d, port=-1)      # again on the same store: its index read back
            nc = await nats.connect(s.url)
            await nc.jetstream().get_msg('Wfile', seq=7, direct=True); await nc.close(); await s.stop()
        print(json.dumps({k: [before.get(k), v] for k, v in forms().items() if v != before.get(k)}))
        print(json.dumps(dict(built=kernels.built() is not None, numba='numba' in sys.modules)))
    asyncio.run(main())
''')


@pytest.mark.parametrize('aot', ['1', '0'])
def test_serving_compiles_no_kernel(tmp_path, aot):
    """Publishing, fetching, Direct Gets one at a time and in batches, a purge, KV, a backup and restore, and a restart:
    with the kernels compiled in the process (`JSNB_AOT=0`), none gains a form; built ahead of time, every call passes
    their argument checks (a `TypeError` would fail the workload) and numba is never imported."""
    env = {**{k: v for k, v in os.environ.items() if k != 'JSNB_JIT_AT_START'}, 'JSNB_AOT': aot}
    r = subprocess.run([sys.executable, '-c', WORKLOAD], capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    changed, how = [json.loads(line) for line in r.stdout.strip().splitlines()[-2:]]
    assert changed == {}                                 # kernel: [forms before, after], for any that compiled
    assert how == dict(built=aot == '1', numba=aot == '0'), (how, r.stderr[-2000:])
