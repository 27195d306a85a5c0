import pytest


@pytest.fixture(autouse=True, scope="session")
def _single_blas_thread():
    """The matrices are small; oversubscribed OpenBLAS threads are far slower on shared CI cores."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield
