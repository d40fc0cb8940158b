"""
A benchmark script's command run in this process: its module's ``main(argv)``, from the repository's root.

The study reports chain scripts (a study's report commands, the evidence study's three ``report.py`` reports, its
README tables and decisions). A fresh interpreter per script would import torch, SB3 and seaborn again (about 4 CPU
seconds a script); in this process they are imported once. Every script states the command it was given
(its ``argv``), so a page reads the same either way.
"""

import contextlib
import importlib
import io
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def module_name(script: str) -> str:
    """
    The module of a script of the ``benchmarks`` package, given by its path from the repository's root.

    :param script: the script's path, such as ``benchmarks/kit/report.py``
    :return: its module's name, such as ``benchmarks.kit.report``
    """
    path = Path(script)
    if path.is_absolute() or path.suffix != ".py" or path.parts[0] != "benchmarks":
        raise ValueError(f"script must be a .py path under benchmarks/, relative to the repository's root, got {script!r}")
    return ".".join(path.with_suffix("").parts)


def run_script(command: Sequence[str], capture: bool = False) -> str:
    """
    Run ``command`` (a script's path from the repository's root, then its arguments) as its module's ``main(argv)``
    would run from the command line, in the repository's root.

    :param command: the script, then its arguments
    :param capture: return what the script printed instead of printing it
    :return: what it printed when ``capture``, else ``""``
    :raises RuntimeError: the script exited with an error (``sys.exit`` with a nonzero code, or ``parser.error``)
    """
    script, *argv = command
    main = importlib.import_module(module_name(script)).main
    printed = io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(printed) if capture else contextlib.nullcontext():
        try:
            main(argv)
        except SystemExit as error:
            if error.code not in (None, 0):
                raise RuntimeError(f"{' '.join(command)} exited with {error.code!r}") from error
    return printed.getvalue()
