"""Training a comparison's runs that are not recorded yet, on local worker processes or a Ray cluster."""

import statistics
import time
from typing import Any

from sb3_reset_ppo.experiments import executors, runner
from sb3_reset_ppo.experiments.compare.settings import CompareSettings
from sb3_reset_ppo.experiments.runner import RunSpec


def _say(line: str) -> None:
    print(line, flush=True)  # flushed: the command's output is often a log file read while the runs train


class Progress:
    """
    Prints each run as it finishes: how many are done, the time so far, and a forecast of the rest.

    :param total: Runs to train
    :param workers: Runs at a time, for the forecast (None: no forecast, e.g. on a Ray cluster)
    """

    def __init__(self, total: int, workers: int | None) -> None:
        self.total, self.workers, self.done = total, workers, 0
        self.start = time.monotonic()
        self.seconds: list[float] = []

    @staticmethod
    def clock(seconds: float) -> str:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{rest:02d}s"

    def __call__(self, spec: RunSpec, result: dict[str, Any]) -> None:
        self.done += 1
        self.seconds.append(float(result.get("seconds", 0.0)))
        left = self.total - self.done
        forecast = ""
        if left and self.workers:
            forecast = f", about {self.clock(statistics.median(self.seconds) * left / self.workers)} left"
        _say(
            f"[{self.done}/{self.total}] {spec.label or spec.algo} seed {spec.seed}: "
            f"{runner.status(result, spec.evaluations)} in {result.get('seconds', 0.0):.0f} s "
            f"({self.clock(time.monotonic() - self.start)} so far{forecast})"
        )
        if "error" in result:
            _say(f"    {result['error'][:2000]}")
        if result.get("returncode", 0) > 0:
            log = spec.run_dir / "log.txt"
            log = log if log.exists() else spec.run_dir / "log.txt.gz"
            tail = result.get("log_tail") or []
            _say(f"    its log: {log}" + (", last lines:" if tail else ""))
            for line in tail:
                _say(f"      {line}")


def _lost(spec: RunSpec, result: dict[str, Any], attempt: int) -> None:
    run = f"{result['variant']} {result['env']} seed {result['seed']}"
    _say(f"{run}: lost with its machine or worker, sent again (attempt {attempt} of {executors.LOST_ATTEMPTS})")


def train(specs: list[RunSpec], settings: CompareSettings) -> None:
    """
    Train the runs of ``specs`` not recorded yet, locally or on the Ray cluster at ``settings.address``.

    :raises FileExistsError: a run's folder exists and is not a run's (checked before anything trains)
    """
    todo = [spec for spec in specs if not runner.recorded(spec.run_dir, settings.retry_failed)]
    for spec in todo:
        runner.check_run_dir(spec.run_dir)
    where = f"the Ray cluster at {settings.address}" if settings.address else f"{settings.workers} local workers"
    _say(f"{len(specs) - len(todo)} of {len(specs)} runs already done; {len(todo)} to train on {where}")
    if not todo:
        return
    progress = Progress(len(todo), None if settings.address else min(settings.workers, len(todo)))
    if settings.address:
        executors.run_ray(todo, settings.address, on_result=progress, on_lost=_lost)
    else:
        executors.run_local(todo, runner.run_one, settings.workers, on_result=progress)
