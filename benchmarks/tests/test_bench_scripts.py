"""A benchmark script's command run in this process (``benchmarks/kit/scripts.py``), as the study reports chain them."""

import os
import re

import pytest

from benchmarks.kit.scripts import module_name, run_script


def test_a_script_runs_as_its_modules_main_from_the_repositorys_root() -> None:
    assert module_name("benchmarks/kit/report.py") == "benchmarks.kit.report"
    for wrong in ("examples/train.py", "/abs/benchmarks/kit/report.py", "benchmarks/kit/grid.yml"):
        with pytest.raises(ValueError, match=re.escape("script must be a .py path under benchmarks/")):
            module_name(wrong)
    here = os.getcwd()
    # --help exits with 0: what it printed comes back, and the working folder is this one again
    printed = run_script(["benchmarks/studies/evidence/decisions.py", "--help"], capture=True)
    assert printed.startswith("usage: ") and "--primary" in printed and os.getcwd() == here
    # A command line error (argparse exits with 2) raises, naming the command, as a failed subprocess would
    with pytest.raises(RuntimeError, match=re.escape("decisions.py --out x exited with 2")):
        run_script(["benchmarks/studies/evidence/decisions.py", "--out", "x"], capture=True)
    assert os.getcwd() == here
