"""The notebooks open and run in JupyterLab, as the README says: the `dev` extra installs it, the notebooks'
kernel is there, and a tutorial executes from top to bottom through Jupyter's own machinery."""
import json, pathlib, shutil, subprocess
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / 'nbs' / '0_tutorials' / '00_jetstream_in_a_notebook.ipynb'


def _jupyter(*args, timeout=120):
    exe = shutil.which('jupyter')
    if exe is None: pytest.fail('`jupyter` is not on PATH: pip install -e ".[dev]" installs JupyterLab')
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)


def test_jupyterlab_is_installed():
    r = _jupyter('lab', '--version')
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip().split('.')[0]) >= 4, r.stdout


def test_the_notebooks_kernel_exists():
    "Every notebook asks for a kernel that this installation has."
    specs = json.loads(_jupyter('kernelspec', 'list', '--json').stdout)['kernelspecs']
    wanted = {json.loads(p.read_text())['metadata'].get('kernelspec', {}).get('name', 'python3')
              for p in (ROOT / 'nbs').rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts}
    assert wanted <= set(specs), (wanted, set(specs))


def test_a_tutorial_executes_in_jupyter(tmp_path):
    "`jupyter nbconvert --execute` runs the first tutorial (in its own folder, as JupyterLab would) without an error."
    r = _jupyter('nbconvert', '--to', 'notebook', '--execute', '--ExecutePreprocessor.timeout=300',
                 '--output-dir', str(tmp_path), str(TUTORIAL), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads((tmp_path / TUTORIAL.name).read_text())
    errors = [o for c in out['cells'] for o in c.get('outputs', []) if o.get('output_type') == 'error']
    assert not errors and any(c.get('outputs') for c in out['cells'])
