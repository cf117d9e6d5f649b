"""The Spark pages say what the code does: the figures they quote are the code's, the schemas they print are the
source's, and the option table lists exactly the options the source takes."""
import inspect, json, pathlib, re
import pytest
pytest.importorskip('pyspark')
from jsnb.clients.spark import SCHEMA, _publish
from jsnb.clients.spark_read import OPTIONS, SETTINGS

PAGES = pathlib.Path(__file__).resolve().parent.parent / 'nbs' / '3_clients'


def cells(name: str, kind: str) -> list[dict]:
    return [c for c in json.loads((PAGES / name).read_text())['cells'] if c['cell_type'] == kind]


def text(name: str) -> str: return '\n'.join(''.join(c['source']) for c in cells(name, 'markdown'))


def test_publishes_in_flight_as_the_code():
    "The Spark page's figure for the publishes a write task keeps in flight is `_publish`'s window (it said 256 for 4,096)."
    said = re.findall(r'up to ([\d,]+) publishes in flight', text('02_spark.ipynb'))
    assert said and {int(s.replace(',', '')) for s in said} == {inspect.signature(_publish).parameters['window'].default}


def test_printed_schemas_are_the_sources():
    "Every `printSchema` output saved in the client pages shows `headers` as the source has it: a map from a key to the list of its values."
    shown = [''.join(o.get('text', '')) for name in sorted(p.name for p in PAGES.glob('*.ipynb')) for c in cells(name, 'code')
             if 'printSchema' in ''.join(c['source']) for o in c.get('outputs', [])]
    with_headers = [s for s in shown if '|-- headers:' in s]
    assert with_headers, 'no printed schema with a headers column'
    assert 'headers map<string,array<string>>' in SCHEMA
    for s in with_headers:
        block = s[s.index('|-- headers:'):].split('|-- data')[0]
        assert re.search(r'\|-- value: array .*\n.*\|-- element: string', block), block


def test_option_table_lists_the_options():
    "The options in the Spark page's table are those the source takes, no more and no fewer."
    table = [l for l in text('02_spark.ipynb').splitlines() if l.startswith('| `')]
    named = {n for l in table for n in re.findall(r'`([a-z_.]+)`', l.split('|')[1])}
    assert named == set(OPTIONS) | {f'nats.{s}' for s in SETTINGS}, named ^ (set(OPTIONS) | {f'nats.{s}' for s in SETTINGS})


def test_no_claims_the_source_does_not_keep():
    """The pages no longer promise what messages going away can break (issue: "nothing is read twice or skipped",
    "every partition sees the same snapshot"); they say what happens instead (`fail_on_data_loss`)."""
    pages = {p.name: text(p.name) for p in PAGES.glob('*spark*.ipynb')}
    for claim in ('nothing is read twice or skipped', 'every partition sees the same snapshot'):
        assert not [n for n, t in pages.items() if claim in ' '.join(t.split())], claim
    assert all('fail_on_data_loss' in pages[n] for n in ('02_spark.ipynb', '02a_spark_read.ipynb'))


def test_cluster_read_on_the_spark_page():
    """The Spark page reads a three-server cluster with a server killed mid-read (its saved output: every row once) and
    quotes the read throughput of an R3 stream on three servers against an R1 stream on one, in rows per second."""
    page = cells('02_spark.ipynb', 'markdown') + cells('02_spark.ipynb', 'code')
    section = text('02_spark.ipynb').split('## Reading a cluster', 1)
    assert len(section) == 2, 'no cluster section'
    shown = '\n'.join(''.join(o.get('text', '')) for c in page if c['cell_type'] == 'code' for o in c.get('outputs', []))
    assert 'server killed mid-read: True' in shown and 'rows: 30000, missing: 0, read twice: 0, wrong payload: 0' in shown
    figures = re.findall(r'([\d,]+) rows/s', section[1])
    assert len(figures) >= 2 and 'FIGURES' not in section[1], section[1][-600:]


def test_an_analysis_of_data_not_made_up():
    "The stream-history page publishes the project's own benchmark results (CSV files in the repository) into a stream and reads them back through the source."
    code = '\n'.join(''.join(c['source']) for c in cells('05_stream_history.ipynb', 'code'))
    files = re.findall(r"'(bench-[a-z-]+\.csv)'", code)
    assert files and all((PAGES.parent / 'data' / f).exists() for f in files), files
    assert "option('stream', 'BENCHMARKS')" in code and 'csv.DictReader' in code
