"""The xdist groups of tests/conftest.py reach the workers (dev.py test runs the suite in pytest-xdist workers).

Regression: the marks were added only where ``numprocesses`` was set, which is the controller alone; xdist's
``setup_config`` clears it in every worker, and the controller schedules by the node ids the workers collect, so
no group ever formed: the local Redis Cluster and each module-scoped server stack started once per worker, and the
TypeScript build ran in two workers at once.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from xdist.remote import setup_config

from tests.conftest import _groups_apply


def _config(pytestconfig: pytest.Config, **options: object) -> pytest.Config:
    option = argparse.Namespace(**options)
    fake = SimpleNamespace(option=option, pluginmanager=pytestconfig.pluginmanager,
                           getvalue=lambda name: getattr(option, name))
    return fake  # type: ignore[return-value]


def test_groups_apply_in_the_controller_and_in_every_worker(pytestconfig: pytest.Config) -> None:
    controller = _config(pytestconfig, dist="loadgroup", numprocesses=2)
    assert _groups_apply(controller)
    worker = _config(pytestconfig, dist="loadgroup", numprocesses=2)
    setup_config(worker, None)  # what xdist does to the options it sends to a worker
    assert worker.option.numprocesses is None
    assert _groups_apply(worker)


def test_no_groups_without_xdist(pytestconfig: pytest.Config) -> None:
    assert not _groups_apply(_config(pytestconfig, dist="no", numprocesses=None))
    worker = _config(pytestconfig, dist="load", numprocesses=2)
    setup_config(worker, None)
    assert not _groups_apply(worker)  # --dist load: the groups would mean nothing


def test_xdist_can_suffix_a_node_id_with_its_group(request: pytest.FixtureRequest) -> None:
    """xdist forms a group only if a worker can rename its items: its own hook appends @group to the node id. With
    pytest 9.2 the rename is lost (the id is computed from a structured id) and every test is scheduled alone."""
    from xdist.remote import WorkerInteractor

    item = request.node
    before = item.nodeid
    item.add_marker(pytest.mark.xdist_group("probe"))
    option = argparse.Namespace(loadgroup=True)
    config = SimpleNamespace(option=option, getvalue=lambda name: getattr(option, name))
    try:
        WorkerInteractor.pytest_collection_modifyitems(None, config, [item])  # type: ignore[arg-type]
        after = item.nodeid
    finally:
        if hasattr(item, "_nodeid"):
            item._nodeid = before
    assert after == f"{before}@probe"
