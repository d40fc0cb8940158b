"""
The settings matrix: every option of ResetPPO and MaskableResetPPO that changes what is trained, with the
values worth telling apart, and the combinations the tests run.

The combinations are a covering array built by covertable: every pair of option values (``strength=2``, the fast
sample that ``make test`` runs) or every triple (``strength=3``, ``make test-matrix``) appears in at least one
combination, among those the constraints allow (``tests/reset_ppo/test_settings_matrix.py`` checks the coverage by brute
force). The array is deterministic (covertable's greedy construction with a fixed salt), so a failure names a
combination that reproduces.
"""

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import covertable

# Each option with its values; the first value of each is ResetPPO's default (or the most common setting)
OPTIONS: dict[str, list[Any]] = {
    "boundary": ["reset", "mask"],
    "weighting": ["uniform", "importance", "kept_mean"],
    "window_coverage": ["full", "inside"],
    "window_size": ["batch", "rollout", 1, 3],
    "window_stride": [None, 1, 2],
    "consecutive_windows": ["auto", 1, 2],
    "burn_in": [0, 2],
    "memory_refresh": [0, 1],
    # The memory: an LSTM, a GRU, or attention (Transformer-XL; its layers are n_layers, its critic cases the same)
    "cell": ["Lstm", "Gru", "TrXL"],
    "n_layers": [1, 2],
    # sb3-contrib's three critic cases: its own memory (default), the actor's (shared), none
    "critic": ["own", "shared", "none"],
    "n_envs": [1, 2],
    # (n_steps, batch_size): dividing, not dividing (the epoch's remainder left out), the whole epoch, below the window
    "sizes": [(12, 6), (10, 7), (10, None), (12, 2)],
    "action": ["discrete", "box", "multidiscrete", "multibinary"],
    "observation": ["box", "box64", "image", "dict", "multidiscrete"],
    "masks": [False, True],
    "use_sde": [False, True],
    "clip_range_vf": [None, 0.2],
    "normalize_advantage": [True, False],
}


@dataclass(frozen=True)
class Row:
    """One row of a covering array: a value for each of :attr:`options`, in their order (a subclass names them)."""

    options: ClassVar[dict[str, list[Any]]]
    values: tuple[Any, ...]

    def __getitem__(self, option: str) -> Any:
        return self.values[list(self.options).index(option)]

    @property
    def id(self) -> str:
        """A short, readable test id."""
        return "-".join(f"{name}={value}" for name, value in zip(self.options, self.values, strict=True))


def uncovered_pairs(
    options: dict[str, list[Any]], rows: Sequence[Row], allowed: Callable[[dict[str, Any]], bool]
) -> list[tuple[str, Any, str, Any]]:
    """
    By brute force, every pair of values of two options that ``allowed`` allows and no row holds (empty: the rows
    cover every allowed pair, a covering array's promise at strength 2).

    :param options: Each option with its values
    :param rows: The covering array
    :param allowed: The constraints, on a partial ``{option: value}``
    :return: ``(option, value, option, value)`` of each pair missed
    """
    names = list(options)
    covered = {(a, b, repr(row[a]), repr(row[b])) for row in rows for a, b in itertools.combinations(names, 2)}
    return [
        (a, value_a, b, value_b)
        for a, b in itertools.combinations(names, 2)
        for value_a, value_b in itertools.product(options[a], options[b])
        if allowed({a: value_a, b: value_b}) and (a, b, repr(value_a), repr(value_b)) not in covered
    ]


class Combination(Row):
    """One combination of the matrix: each option's value (see :data:`OPTIONS`)."""

    options = OPTIONS

    def policy(self) -> str:
        """The policy alias for the observation and cell."""
        kind = {"image": "Cnn", "dict": "MultiInput"}.get(self["observation"], "Mlp")
        return f"{kind}{self['cell']}Policy"

    def model_kwargs(self) -> dict[str, Any]:
        """The constructor arguments of the combination (besides policy and env)."""
        n_steps, batch_size = self["sizes"]
        critic = self["critic"]
        if self["cell"] == "TrXL":
            memory = {
                "memory_length": 3,
                "trxl_dim": 4,
                "n_trxl_layers": self["n_layers"],
                "n_attention_heads": 2,
                "shared_trxl": critic == "shared",
                "enable_critic_trxl": critic == "own",
            }
        else:
            memory = {
                "lstm_hidden_size": 4,
                "n_lstm_layers": self["n_layers"],
                "shared_lstm": critic == "shared",
                "enable_critic_lstm": critic == "own",
            }
        return {
            "n_steps": n_steps,
            "batch_size": batch_size,
            "boundary": self["boundary"],
            "weighting": self["weighting"],
            "window_coverage": self["window_coverage"],
            "window_size": self["window_size"],
            "window_stride": self["window_stride"],
            "consecutive_windows": self["consecutive_windows"],
            "burn_in": self["burn_in"],
            "memory_refresh": self["memory_refresh"],
            "use_sde": self["use_sde"],
            "clip_range_vf": self["clip_range_vf"],
            "normalize_advantage": self["normalize_advantage"],
            "policy_kwargs": {**memory, "net_arch": [4]},
        }


def allowed(given: dict[str, Any]) -> bool:
    """The constraints between options, on a (possibly partial) combination."""
    action = given.get("action")
    # gSDE needs a continuous action; masks need a discrete one and no gSDE
    if given.get("use_sde") and action not in (None, "box"):
        return False
    # Attention memory has no burn-in (a ValueError says so)
    if given.get("cell") == "TrXL" and given.get("burn_in"):
        return False
    return not (given.get("masks") and (action == "box" or given.get("use_sde")))


_CONSTRAINTS = [
    {"operator": "fn", "requires": ["use_sde", "action"], "evaluate": allowed},
    {"operator": "fn", "requires": ["masks", "action", "use_sde"], "evaluate": allowed},
    {"operator": "fn", "requires": ["cell", "burn_in"], "evaluate": allowed},
]


def combinations(strength: int | None = None) -> list[Combination]:
    """
    The combinations to run: a covering array of the given strength (``None``: 3 when the environment variable
    ``SB3_RESET_PPO_MATRIX`` is ``full``, else 2).

    :param strength: Every tuple of this many option values appears in some combination
    :return: The combinations
    """
    return [Combination(values) for values in covering_array(OPTIONS, _CONSTRAINTS, strength)]


def covering_array(options: dict[str, list[Any]], constraints: list[dict[str, Any]], strength: int | None) -> list[tuple]:
    """
    A covering array of ``options`` (covertable's, deterministic): rows of values, one per option in order.

    :param options: Each option with its values
    :param constraints: covertable's ``fn`` constraints, each ``evaluate`` taking a (partial) ``{option: value}``
    :param strength: Every tuple of this many option values appears in some row (``None``: 3 when the environment
        variable ``SB3_RESET_PPO_MATRIX`` is ``full``, else 2)
    :return: The rows
    """
    if strength is None:
        strength = 3 if os.environ.get("SB3_RESET_PPO_MATRIX") == "full" else 2
    # covertable takes hashable values: each option's values by index
    factors = {name: list(range(len(values))) for name, values in options.items()}

    def indexed(check: Any) -> Any:
        return lambda row: check({name: options[name][index] for name, index in row.items()})

    indexed_constraints = [{**constraint, "evaluate": indexed(constraint["evaluate"])} for constraint in constraints]
    rows = covertable.make(factors, strength=strength, constraints=indexed_constraints, salt="sb3-reset-ppo")
    return [tuple(options[name][row[name]] for name in options) for row in rows]
