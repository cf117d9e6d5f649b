"""The notebooks are the source and the documentation: each one runs top to bottom, and the
package and notebooks are exactly what `nbdev_export` and `nbdev_clean` make of them."""
import os, pathlib, shutil, subprocess, sys
import pytest
from procgroup import run_group

ROOT = pathlib.Path(__file__).resolve().parent.parent
NBS = sorted(str(p.relative_to(ROOT / 'nbs')) for p in (ROOT / 'nbs').rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)


@pytest.mark.parametrize('nb', NBS)
def test_notebook_runs(nb):
    "Execute every cell (except `#| eval: false`), as `nbdev_test` does, in a fresh process."
    code = ('import sys, pathlib; from nbdev.test import test_nb; '
            f'ok, _ = test_nb(pathlib.Path({str(ROOT / "nbs" / nb)!r})); sys.exit(0 if ok else 1)')
    rc, _, err = run_group([sys.executable, '-c', code], 600, cwd=ROOT)     # (and whatever it left running ends with it)
    assert rc == 0, err[-5000:]


def _copy_project(tmp_path):
    dst = tmp_path / 'proj'
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns('.git', '_docs', '_proc', '*.egg-info', '__pycache__', '.pytest_cache'))
    return dst


def test_export_changes_nothing(tmp_path):
    "`nbdev_export` reproduces `jsnb/` exactly: nobody edited the package by hand."
    proj = _copy_project(tmp_path)
    r = subprocess.run(['nbdev_export'], cwd=proj, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    def files(top): return {p.relative_to(top): p.read_bytes() for p in top.rglob('*.py')}
    ours, made = files(ROOT / 'jsnb'), files(proj / 'jsnb')
    assert ours.keys() == made.keys(), sorted(set(ours) ^ set(made))
    assert [str(f) for f in ours if ours[f] != made[f]] == []


def test_notebooks_are_clean(tmp_path):
    "`nbdev_clean` changes no notebook (no stray metadata or execution counts)."
    proj = _copy_project(tmp_path)
    r = subprocess.run(['nbdev_clean'], cwd=proj, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    changed = [nb for nb in NBS if (ROOT / 'nbs' / nb).read_bytes() != (proj / 'nbs' / nb).read_bytes()]
    assert not changed, changed


def test_saved_outputs_have_no_errors():
    "The outputs saved in the notebooks (what the documentation shows) hold no exception."
    import json
    bad = [(nb, i) for nb in NBS for i, c in enumerate(json.loads((ROOT / 'nbs' / nb).read_text())['cells'])
           if any(o.get('output_type') == 'error' for o in c.get('outputs', []))]
    assert not bad, bad


def test_readme_is_generated_from_index():
    "README.md is exactly what `jsnb-docs readme` makes of `nbs/index.ipynb`."
    from jsnb.tools.docs import readme
    assert (ROOT / 'README.md').read_text() == readme(ROOT)


def test_readme_links_resolve():
    "Every relative link of README.md names a file of the repository."
    import re
    links = re.findall(r'\]\(([^)#:\s]+)(?:#[^)]*)?\)', (ROOT / 'README.md').read_text())
    assert links and not [l for l in links if not (ROOT / l).exists()]


def test_sidebar_is_generated_from_the_folders():
    "`nbs/sidebar.yml` (what Quarto reads) is exactly what `jsnb-docs sidebar` makes of the folders."
    from jsnb.tools.docs import sidebar_yml
    assert (ROOT / 'nbs' / 'sidebar.yml').read_text() == sidebar_yml(ROOT / 'nbs')
