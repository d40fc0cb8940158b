"""Small helpers with no window logic."""

import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import sb3_contrib
import stable_baselines3
import torch as th

# The RL Zoo hyperparameters shipped with the package: the zoo's default --conf-file, and compare's
PACKAGED_CONF = Path(__file__).resolve().parents[1] / "zoo" / "reset_ppo.yml"
# Guards divisions by a sum that can be zero (a minibatch with no kept slot, a memory of zeros)
TINY = 1e-12

# Code in these folders is library code: a warning points at the first frame outside them
_LIBRARY_DIRS = tuple(
    str(directory) + os.sep
    for directory in (
        Path(__file__).resolve().parent.parent,
        *(Path(str(module.__file__)).resolve().parent for module in (stable_baselines3, sb3_contrib)),
    )
)


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Issue a warning attributed to the user's line: the first frame outside sb3-reset-ppo, SB3 and sb3-contrib."""
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_LIBRARY_DIRS):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


class ThreadCountWarning(UserWarning):
    """``learn()`` runs on the CPU with more torch threads than is fastest for the model's size (see :func:`thread_advice`)."""


# The largest recurrent hidden size at which one torch thread was faster in every measurement, idle included
ONE_THREAD_MAX_HIDDEN_SIZE = 64
# A 1-minute load average from which the machine counts as busy: about one other process's work
BUSY_LOAD = 1.0


class ThreadMeasurement(NamedTuple):
    """More threads' ``learn()`` time over one thread's, lowest and highest (None: over 5), idle and beside a busy process."""

    label: str
    idle: tuple[float, float | None]
    busy: tuple[float, float | None]


# benchmarks/results/bench_threads_quiet.json, as docs/studies/performance.md ("Threads") tabulates it
THREAD_MEASUREMENTS = {
    "small": ThreadMeasurement("MLP, hidden size 64 (LSTM, GRU)", (1.01, None), (3.01, None)),
    "large": ThreadMeasurement("MLP, LSTM 256", (0.75, 1.37), (1.93, None)),
    "convolutional": ThreadMeasurement("CNN, LSTM 64 and 256", (0.56, 0.91), (1.85, 3.16)),
}


def machine_load() -> float | None:
    """The 1-minute load average, None where the system does not give one (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _at_most(ratio: float | None) -> str:
    return "more than 5" if ratio is None else f"{ratio:.2f}"


def _times(measured: tuple[float, float | None]) -> str:
    return f"{measured[0]:.2f} to {_at_most(measured[1])} times"


def thread_advice(
    algorithm: str,
    num_threads: int,
    hidden_size: int,
    device_type: str,
    convolutional: bool = False,
    load: float | None = None,
) -> str | None:
    """
    The advice to ``algorithm`` (the class name), running ``num_threads`` torch threads, to train with one where
    :data:`THREAD_MEASUREMENTS` found more threads slower for its recurrent ``hidden_size`` (``convolutional``: with
    convolutions); else None.

    :param device_type: The model's device type (``"cpu"``, ``"cuda"``, ...): only the CPU's threads are advised on
    :param load: The machine's 1-minute load average (:func:`machine_load`); None: idle
    :return: One line saying what was measured and how to change it, or None
    """
    if device_type != "cpu" or num_threads <= 1:
        return None
    kind = "convolutional" if convolutional else "small" if hidden_size <= ONE_THREAD_MAX_HIDDEN_SIZE else "large"
    measured = THREAD_MEASUREMENTS[kind]
    busy = load is not None and load >= BUSY_LOAD
    if (measured.busy if busy else measured.idle)[0] <= 1.0:
        return None
    policy = "with convolutions" if convolutional else f"of hidden size {hidden_size} without convolutions"
    where = f" such as this machine (1-minute load average {load:.1f})" if busy and load is not None else ""
    idle = f"; on an idle machine {_times(measured.idle)}" if measured.idle[0] > 1.0 else ""
    return (
        f"{algorithm}.learn() runs with {num_threads} torch threads on the CPU; for a recurrent policy {policy}, "
        f"beside a busy process{where} more threads made learn() up to {_at_most(measured.busy[1])} times slower than "
        f"one thread (measured: {_times(measured.busy)}{idle}; {measured.label}, benchmarks/speed/bench_threads.py). "
        "Fix: call torch.set_num_threads(1) before training (the RL Zoo: --num-threads 1); to silence this, "
        "warnings.filterwarnings('ignore', category=sb3_reset_ppo.common.utils.ThreadCountWarning)"
    )


def relative_distance(new: Iterable[th.Tensor], old: Iterable[th.Tensor]) -> th.Tensor:
    """``||new - old|| / ||old||``, each side's tensors (same order and shapes) as one vector: a 0-d tensor, no host read."""
    pairs = list(zip(new, old, strict=True))
    difference = sum(((a - b) ** 2).sum() for a, b in pairs)
    size = sum((b**2).sum() for _, b in pairs)
    return (th.as_tensor(difference) / th.as_tensor(size).clamp(min=TINY)).sqrt()


def read_zoo_yaml(path: Path) -> Any:
    """A YAML file the RL Zoo saved (``config.yml``, ``args.yml``), read safely with its ``OrderedDict`` tag as a dict."""
    import yaml  # rl_zoo3's dependency, not the core's

    # libyaml's parser where PyYAML was built with it (the constructors, hence the values, are the same): a study's
    # report reads a thousand of these files
    class ZooLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        """A safe loader that reads the ``OrderedDict`` the zoo dumps with its Python tag."""

    # !!python/object/apply:collections.OrderedDict [[[key, value], ...]]
    ordered_dict = "tag:yaml.org,2002:python/object/apply:collections.OrderedDict"
    ZooLoader.add_constructor(ordered_dict, lambda loader, node: dict(loader.construct_sequence(node, deep=True)[0]))
    return yaml.load(Path(path).read_text(), Loader=ZooLoader)


@contextmanager
def swapped_names(swaps: Mapping[tuple[Any, str], tuple[Any, Any]], to_update: str, reentrant: bool = False) -> Iterator[None]:
    """
    For the block, point names that a library looks up at module level at values of our own, and restore them after.

    :param swaps: ``(module, name) -> (expected, replacement)``; the name must hold ``expected``, the library's own
    :param to_update: What must follow the library when a name holds anything else, for the error
    :param reentrant: Accept a name that holds the replacement already (the same block running in another thread)
    :raises RuntimeError: If a name holds another value: the library has changed how it looks the value up
    """
    for (module, name), (expected, replacement) in swaps.items():
        found = getattr(module, name, None)
        if found is not expected and not (reentrant and found is replacement):
            raise RuntimeError(
                f"{module.__name__}.{name} is no longer {expected.__module__}.{expected.__qualname__} (found {found!r}): "
                f"{to_update}"
            )
    originals = {key: getattr(*key) for key in swaps}
    try:
        for (module, name), (_, replacement) in swaps.items():
            setattr(module, name, replacement)
        yield
    finally:
        for (module, name), original in originals.items():
            setattr(module, name, original)
