"Packaging for jsnb: every setting comes from nbdev's `settings.ini`."
from configparser import ConfigParser
import os, setuptools, shlex, subprocess
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

licenses = {'apache2': 'Apache-2.0'}          # SPDX expressions (PEP 639)
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
requirements = shlex.split(cfg.get('requirements', ''))
# every `<name>_requirements` key is an extra; `dev` also takes every other extra (it runs all the tests)
extras = {k.removesuffix('_requirements'): shlex.split(v) for k, v in cfg.items() if k.endswith('_requirements')}
extras['dev'] = list(dict.fromkeys([r for k in extras if k != 'dev' for r in extras[k]] + extras.get('dev', [])))
scripts = cfg.get('console_scripts', '').split()
repo = cfg['git_url']

def _commit() -> str:
    "The commit the package is built from: this checkout's, else the one an sdist recorded ('' when neither)."
    try: return subprocess.run(['git', 'rev-parse', '--short=7', 'HEAD'], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return open(os.path.join('jsnb', 'COMMIT')).read().strip() if os.path.exists(os.path.join('jsnb', 'COMMIT')) else ''

def _write_commit(pkg_dir: str):
    "Record the commit next to the code: the server reports it as `git_commit` in INFO and /varz."
    if (c := _commit()) and os.path.isdir(pkg_dir):
        with open(os.path.join(pkg_dir, 'COMMIT'), 'w') as f: f.write(c + '\n')

class BuildPy(build_py):
    def run(self):
        super().run()
        if not self.dry_run: _write_commit(os.path.join(self.build_lib, 'jsnb'))

class Sdist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        _write_commit(os.path.join(base_dir, 'jsnb'))

setuptools.setup(
    cmdclass={'build_py': BuildPy, 'sdist': Sdist},
    name=cfg['lib_name'], version=cfg['version'], license_expression=licenses[cfg['license']], license_files=['LICENSE'],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(), 'Natural Language :: ' + cfg['language'].title(),
                 'Programming Language :: Python :: 3 :: Only', 'Programming Language :: Python :: 3.11',
                 'Programming Language :: Python :: 3.12', 'Programming Language :: Python :: 3.13',
                 'Operating System :: POSIX :: Linux', 'Topic :: System :: Networking', 'Framework :: Jupyter'],
    url=repo, project_urls={'Documentation': cfg['doc_host'] + cfg['doc_baseurl'], 'Source': repo, 'Issues': repo + '/issues'},
    packages=setuptools.find_packages(include=['jsnb', 'jsnb.*']),
    include_package_data=True, install_requires=requirements,
    extras_require=extras, python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(), long_description_content_type='text/markdown',
    zip_safe=False, entry_points={'console_scripts': scripts, 'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
    author=cfg['author'], description=cfg['description'],
    keywords=cfg['keywords'])
