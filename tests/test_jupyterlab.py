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


def _readme_lab_commands() -> list[str]:
    import re
    return re.findall(r'(jupyter lab[^`]*)`', (ROOT / 'README.md').read_text())


def _free_port() -> int:
    import socket
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


def test_the_readmes_jupyterlab_command_starts(tmp_path):
    """The README's `jupyter lab` command that applies to this user (`--allow-root` as root, as it says) starts JupyterLab,
    which serves the notebooks; as root the command without it is refused, which is why the README says so."""
    import os, shlex, time, urllib.request
    root = os.geteuid() == 0
    cmds = _readme_lab_commands()
    assert any('--allow-root' in c for c in cmds) and any('--allow-root' not in c for c in cmds), cmds
    exe = shutil.which('jupyter')
    if exe is None: pytest.fail('`jupyter` is not on PATH: pip install -e ".[dev]" installs JupyterLab')
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / 'runtime'), JUPYTER_CONFIG_DIR=str(tmp_path / 'config'))
    extra = ['--no-browser', '--ServerApp.ip=127.0.0.1', '--ServerApp.token=jsnb-test']
    if root:
        plain = next(c for c in cmds if '--allow-root' not in c)
        r = subprocess.run([exe, *shlex.split(plain)[1:], *extra, f'--ServerApp.port={_free_port()}'], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and 'allow-root' in r.stderr, (r.returncode, r.stderr[-2000:])
    cmd = next(c for c in cmds if ('--allow-root' in c) == root)
    port = _free_port()
    p = subprocess.Popen([exe, *shlex.split(cmd)[1:], *extra, f'--ServerApp.port={port}'], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, listed = time.time() + 120, None
        while listed is None and time.time() < deadline and p.poll() is None:
            try:
                with urllib.request.urlopen(f'http://127.0.0.1:{port}/api/contents/0_tutorials?token=jsnb-test', timeout=5) as r:
                    listed = [x['name'] for x in json.loads(r.read())['content']]
            except OSError: time.sleep(0.5)
        assert listed and TUTORIAL.name in listed, (cmd, p.poll(), listed)
    finally:
        p.terminate()
        try: p.wait(30)
        except subprocess.TimeoutExpired: p.kill(); p.wait()
        p.stderr.close()
