"Packaging for jsnb: every setting comes from nbdev's `settings.ini`."
from configparser import ConfigParser
import os, setuptools, shlex, subprocess
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['Pre-Alpha', 'Alpha', 'Beta', 'Production/Stable', 'Mature', 'Inactive']
lic = licenses[cfg['license']]
requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
spark_requirements = shlex.split(cfg.get('spark_requirements', ''))
scripts = cfg.get('console_scripts', '').split()

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
    name=cfg['lib_name'], version=cfg['version'], license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'License :: ' + lic[1], 'Natural Language :: ' + cfg['language'].title(),
                 'Programming Language :: Python :: 3.11', 'Programming Language :: Python :: 3.12'],
    url=cfg['git_url'], packages=setuptools.find_packages(include=['jsnb', 'jsnb.*']),
    include_package_data=True, install_requires=requirements,
    extras_require={'dev': dev_requirements, 'spark': spark_requirements}, python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(), long_description_content_type='text/markdown',
    zip_safe=False, entry_points={'console_scripts': scripts, 'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
    author=cfg['author'], author_email=cfg['author_email'], description=cfg['description'],
    keywords=cfg['keywords'])
