"""Repository-wide pytest hooks."""


def pytest_collectstart(collector):
    # nbval compares stderr too; warnings there carry /tmp/ipykernel_<pid> paths that change every run
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
