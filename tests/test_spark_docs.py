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
