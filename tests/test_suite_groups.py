"""The suite's own set-up: under pytest-xdist with `--dist loadgroup`, the tests of a module that shares a module-wide
fixture run on one worker (tests/conftest.py marks them with an `xdist_group`, which pytest-xdist writes into the node
id). Were the groups lost (as with pytest 9.2 and pytest-xdist 3.8), such a module would build its fixture on every
worker: the processed notebooks and the built site alone cost minutes each time."""
import os
import pytest


@pytest.fixture(scope='module')
def shared():
    "A module-wide fixture: what makes conftest.py keep this module's tests on one worker."
    return object()


@pytest.mark.parametrize('k', range(3))
def test_a_shared_fixture_keeps_the_module_on_one_worker(k, shared, request):
    if not os.environ.get('PYTEST_XDIST_WORKER') or not request.config.getvalue('loadgroup'):      # (a worker's flag)
        pytest.skip('only under pytest-xdist with --dist loadgroup')
    assert request.node.nodeid.endswith('@test_suite_groups'), request.node.nodeid
