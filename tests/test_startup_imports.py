"""A server without routes loads no clustering code: the Raft modules and PySyncObj come with the first route (they cost
about 40 ms of start-up). Run in a process of its own, so that what other tests imported cannot hide an import."""
import json, subprocess, sys, textwrap

SERVE = textwrap.dedent('''
    import asyncio, json, sys, tempfile
    import nats
    from jsnb.app import serve

    async def main():
        with tempfile.TemporaryDirectory() as d:
            s = await serve(jetstream=True, store_dir=d, port=-1, http_port=-1)
            nc = await nats.connect(s.url); js = nc.jetstream()
            await js.add_stream(name='S', subjects=['s.>']); await js.publish('s.a', b'1')
            await js.add_consumer('S', durable_name='C'); await js.consumer_info('S', 'C')
            await nc.close(); await s.stop()
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(('pysyncobj', 'jsnb.js.raft', 'jsnb.js.cluster')))))
    asyncio.run(main())
''')


def test_a_server_without_routes_loads_no_clustering_code(tmp_path):
    r = subprocess.run([sys.executable, '-c', SERVE], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
