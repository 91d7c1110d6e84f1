"""The suite's parallel run (README's test command: pytest-xdist workers, `--dist loadgroup`, tests/conftest.py):
a test file runs whole on one worker, so a module's fixtures, the Slurm cluster among them, are made once."""
import os
from pathlib import Path

HERE = Path(__file__).name


def test_each_test_carries_its_files_group_and_xdist_schedules_by_it(request):
    """Every test carries its file's xdist group, and under xdist its node id ends with that group: what xdist's
    loadgroup schedules by. A group marked after xdist's own collection hook would be ignored, and the tests of one
    file would be spread over the workers (the Slurm cluster started on two)."""
    mark = request.node.get_closest_marker("xdist_group")
    assert mark is not None and mark.args[0] == HERE
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assert request.node.nodeid.endswith(f"@{HERE}"), request.node.nodeid

