"""Shared fixtures: copies of the installed upstream Hiera, original and rewritten."""

from __future__ import annotations

import os

import pytest

# Under pytest-xdist (README's test command: -n auto) each worker gets its share of the
# cores for torch's intra-op threads, before any test module imports torch; the verify
# workers it starts inherit it.  Two workers of two threads each on two cores only contend.
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)  # macOS: no affinity
    os.environ["OMP_NUM_THREADS"] = str(max(1, _cores // max(1, _workers)))


def pytest_addoption(parser):
    parser.addoption(
        "--update-reports",
        action="store_true",
        help="tests/test_golden.py: write golden/**/NAME.reports.txt from what the tool reports now"
        " (review git diff golden/ afterwards; CI never passes it)",
    )


@pytest.fixture(scope="session")
def upstream(tmp_path_factory):
    """An :class:`tests.upstream.UpstreamBuilder`; ``upstream.package({"hiera.py"})``
    imports a copy of the installed package with only ``hiera.py`` rewritten."""
    pytest.importorskip("torch")
    pytest.importorskip("timm")
    from tests.upstream import UpstreamBuilder, upstream_dir

    try:
        source = upstream_dir()
    except ModuleNotFoundError:
        pytest.skip("hiera-transformer is not installed")
    return UpstreamBuilder(tmp_path_factory.mktemp("upstream"), source)


@pytest.fixture(scope="session")
def hiera_orig(upstream):
    """The upstream package, untouched (imported as ``hiera_orig``)."""
    return upstream.package(())


@pytest.fixture(scope="session")
def hiera_new(upstream):
    """The upstream package with every rewritable file rewritten (``hiera_new``)."""
    from tests.upstream import REWRITABLE

    return upstream.package(REWRITABLE)


@pytest.fixture(scope="module")
def torch_one_thread():
    """Run torch on one intra-op thread for the module's tests.

    The parity and compile models are small: a second OpenMP thread gains little,
    and on a busy 2-core machine its spin-waiting makes small ops several times
    slower (measured: 0.8 s vs 6 s CPU for one small parity cell under load).
    """
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
