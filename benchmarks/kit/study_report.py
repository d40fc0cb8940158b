"""
The command line of a study's own report (the attention, attention defaults, RL Zoo rows, tuned and fair masking
studies'): ``--runs`` (the stored runs), ``--out`` (the folder of ``RESULTS.md`` and ``figures/``, by default the
study's), ``--summaries`` (the folder of the study's JSON summary, by default ``benchmarks/results/``) and ``--reps``
(bootstrap resamples, at least 1); and the files it writes.

A report describes its command line as a :class:`ReportCommand`, adds its own options to :meth:`ReportCommand.parser`,
reads them with :meth:`ReportCommand.parse`, and writes its page, figure and summary with
:meth:`ReportCommand.write`.
"""

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.kit import rundata
from sb3_reset_ppo.experiments import stats


@dataclass(frozen=True)
class ReportCommand:
    """
    A study report's command line and the files it writes.

    :param description: The parser's description (the report's docstring)
    :param folder: The study's folder (``--out``'s default)
    :param runs: The stored runs (``--runs``' default)
    :param runs_help: ``--runs``' help
    :param summary: The summary's file name in ``--summaries``
    :param out_help: ``--out``'s help
    """

    description: str | None
    folder: Path
    runs: Path
    runs_help: str
    summary: str
    out_help: str = "folder of RESULTS.md and figures/ (default: this study's)"

    def parser(self) -> argparse.ArgumentParser:
        """The parser with the options every study report has; a report adds its own after them."""
        parser = argparse.ArgumentParser(description=self.description, formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--runs", type=Path, default=self.runs, help=self.runs_help)
        parser.add_argument("--out", type=Path, default=self.folder, help=self.out_help)
        parser.add_argument("--summaries", type=Path, default=rundata.RESULTS, help=f"folder of {self.summary}")
        parser.add_argument("--reps", type=int, default=stats.REPS, help="bootstrap resamples")
        return parser

    def parse(self, parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
        """
        The parsed arguments, ``--reps`` checked (the parser's ``error`` exits).

        :param parser: :meth:`parser`'s parser, with the report's own options
        :param argv: The arguments (None: the command line's)
        """
        args = parser.parse_args(argv)
        if args.reps < 1:
            parser.error(f"--reps must be at least 1, got {args.reps}")
        return args

    def write(
        self,
        args: argparse.Namespace,
        page: str,
        summary: dict[str, Any],
        figure: Callable[[Path], object] | None = None,
        figure_name: str = "learning_curves.png",
        end: str = "\n",
    ) -> None:
        """
        Write the results page ``RESULTS.md`` and the figure into ``--out``, then the summary into ``--summaries``.

        :param args: The parsed arguments (:meth:`parse`'s)
        :param page: The results page
        :param summary: The summary, written as indented JSON
        :param figure: Draws the figure into the path it is given (None: the report has no figure)
        :param figure_name: The figure's file name in ``<out>/figures/``
        :param end: The text after the page and after the summary
        """
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "RESULTS.md").write_text(page + end)
        if figure is not None:
            figure(args.out / "figures" / figure_name)
        args.summaries.mkdir(parents=True, exist_ok=True)
        (args.summaries / self.summary).write_text(json.dumps(summary, indent=1) + end)
