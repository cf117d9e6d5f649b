#!/usr/bin/env bash
# The suite on the newest Python this machine has, besides the one CI runs first (the lowest supported, 3.11).
# A new virtualenv, the README's install (`pip install -e ".[dev]"`), then every test but those that do not depend on
# the Python version and take long (the documentation site in a browser, nbdev's docs, JupyterLab, Spark). With less
# than BUDGET seconds of CI left (its limit is 90 min, and a busy machine takes twice as long as a quiet one), only the core:
# protocol, server, JetStream, stores, kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
started=${CI_STARTED:-$(date +%s)}
newest=""
for v in 3.15 3.14 3.13 3.12; do
  for exe in "python$v" /root/.pyenv/versions/$v*/bin/python; do
    if command -v "$exe" >/dev/null 2>&1 && "$exe" -c 'import venv, ensurepip' 2>/dev/null; then newest=$(command -v "$exe"); break 2; fi
  done
done
if [ -z "$newest" ]; then echo "newest-python: no Python newer than 3.11 on this machine; the suite ran on 3.11 only"; exit 0; fi
if [ $(( 5400 - ($(date +%s) - started) )) -lt "${MIN_LEFT:-1200}" ]; then
  echo "newest-python: less than ${MIN_LEFT:-1200} s of CI left: not run this time"; exit 0
fi
echo "newest-python: $("$newest" --version) ($newest)"
venv=$(mktemp -d /tmp/jsnb-newest-XXXXXX)
trap 'rm -rf "$venv"' EXIT
"$newest" -m venv "$venv"
"$venv/bin/pip" install -q -e ".[dev]"
left=$(( 5400 - ($(date +%s) - started) ))
args=(-p randomly --ignore tests/test_docs_site.py --ignore tests/test_nbdev_docs.py --ignore tests/test_jupyterlab.py
      --ignore tests/test_spark.py --ignore tests/test_spark_security.py --ignore tests/test_spark_bench.py)
if [ "$left" -lt "${BUDGET:-3000}" ]; then
  echo "newest-python: $left s of CI left: the core tests only"
  args+=(tests/test_protocol_reference.py tests/test_core_robustness_reference.py tests/test_core_interop.py tests/test_stores.py
         tests/test_kernels.py tests/test_streams_reference.py tests/test_consumers_interop.py tests/test_cli_monitor.py)
fi
"$venv/bin/python" -m pytest "${args[@]}"
