"""
Torch's thread count: ResetPPO says once per model when learn() runs with more threads than is fastest for its size
(and never changes the count itself); the entry points default to one thread with a flag to change it. The benchmark
that decided it (benchmarks/speed/bench_threads.py) and its stored results are tested in
benchmarks/tests/test_bench_threads.py.
"""

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch as th
from stable_baselines3.common.env_util import make_vec_env

import sb3_reset_ppo.envs  # noqa: F401  (registers CueRecall-v0 and MaskedCueRecall-v0)
from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.common.utils import (
    ONE_THREAD_MAX_HIDDEN_SIZE,
    THREAD_MEASUREMENTS,
    ThreadCountWarning,
    thread_advice,
)
from sb3_reset_ppo.reset_ppo import reset_ppo as reset_ppo_module
from sb3_reset_ppo.zoo import with_default_threads

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def two_threads() -> Iterator[None]:
    """Torch with two threads for the test (conftest.py sets one for the whole suite), one again after it."""
    before = th.get_num_threads()
    th.set_num_threads(2)
    try:
        yield
    finally:
        th.set_num_threads(before)


def _model(cls: type[ResetPPO] = ResetPPO, hidden: int = 8, env_id: str = "CueRecall-v0") -> ResetPPO:
    env = make_vec_env(env_id, n_envs=2, seed=0)
    return cls("MlpLstmPolicy", env, n_steps=16, batch_size=16, n_epochs=1, policy_kwargs=dict(lstm_hidden_size=hidden))


def _thread_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [warning for warning in caught if issubclass(warning.category, ThreadCountWarning)]


@pytest.mark.usefixtures("two_threads")
def test_learn_says_once_per_model_that_one_thread_is_faster() -> None:
    model = _model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(32)
        model.learn(32, reset_num_timesteps=False)
    (warning,) = _thread_warnings(caught)
    message = str(warning.message)
    assert message.startswith("ResetPPO.learn() runs with 2 torch threads on the CPU; for a recurrent policy of hidden ")
    assert "torch.set_num_threads(1)" in message and "--num-threads 1" in message and "\n" not in message
    assert Path(warning.filename).resolve() == Path(__file__).resolve()  # the user's line, not the library's
    # The library leaves torch's thread count alone: it is the user's process's setting
    assert th.get_num_threads() == 2
    # Another model says it again, once; so does MaskableResetPPO (its learn() is ResetPPO's)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _model().learn(32)
        _model(MaskableResetPPO, env_id="MaskedCueRecall-v0").learn(32)
    assert [str(w.message).split(".", 1)[0] for w in _thread_warnings(caught)] == ["ResetPPO", "MaskableResetPPO"]


@pytest.mark.usefixtures("two_threads")
def test_nothing_is_said_for_a_convolutional_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    # With image features two threads were faster in some measurements (at a low load): no advice there
    monkeypatch.setattr(reset_ppo_module, "machine_load", lambda: 0.1)  # an idle machine
    env = make_vec_env("CueRecallImage-v0", n_envs=2, seed=0)
    model = ResetPPO("CnnLstmPolicy", env, n_steps=16, batch_size=16, n_epochs=1, policy_kwargs=dict(lstm_hidden_size=8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(32)
    assert _thread_warnings(caught) == []
    assert thread_advice("ResetPPO", 2, 8, "cpu", convolutional=True) is None


def test_nothing_is_said_with_one_thread_or_a_network_larger_than_measured(tmp_path: Path) -> None:
    assert th.get_num_threads() == 1  # conftest.py
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _model().learn(32)
    assert _thread_warnings(caught) == []
    assert thread_advice("ResetPPO", 8, ONE_THREAD_MAX_HIDDEN_SIZE + 1, "cpu") is None
    assert thread_advice("ResetPPO", 8, 64, "cuda") is None and thread_advice("ResetPPO", 1, 64, "cpu") is None
    assert thread_advice("ResetPPO", 8, ONE_THREAD_MAX_HIDDEN_SIZE, "cpu") is not None
    # Whether this process was told is not saved with the model
    model = _model()
    model._warned_about_threads = True
    model.save(tmp_path / "model.zip")
    assert not hasattr(ResetPPO.load(tmp_path / "model.zip"), "_warned_about_threads")


# (policy, env, hidden size, load, what the advice says; None: nothing): every kind of policy that
# bench_threads.py measured, on an idle machine and beside a busy process
_ADVICE_CASES = [
    ("MlpLstmPolicy", "CueRecall-v0", 64, 0.1, "up to more than 5 times slower than one thread (measured: 3.01 to more"),
    ("MlpLstmPolicy", "CueRecall-v0", 64, 3.0, "such as this machine (1-minute load average 3.0)"),
    ("MlpLstmPolicy", "CueRecall-v0", 256, 0.1, None),
    ("MlpLstmPolicy", "CueRecall-v0", 256, 3.0, "up to more than 5 times slower than one thread (measured: 1.93 to more"),
    ("MlpGruPolicy", "CueRecall-v0", 64, 0.1, "of hidden size 64 without convolutions"),
    ("MlpGruPolicy", "CueRecall-v0", 256, 3.0, "(measured: 1.93 to more than 5 times; MLP, LSTM 256"),
    ("CnnLstmPolicy", "CueRecallImage-v0", 64, 0.1, None),
    ("CnnLstmPolicy", "CueRecallImage-v0", 256, 3.0, "up to 3.16 times slower than one thread (measured: 1.85 to 3.16"),
]


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize(("policy", "env_id", "hidden", "load", "says"), _ADVICE_CASES)
def test_the_advice_covers_every_policy_where_one_thread_was_faster(
    monkeypatch: pytest.MonkeyPatch, policy: str, env_id: str, hidden: int, load: float, says: str | None
) -> None:
    # More threads won some idle measurements of LSTM 256 and every idle one with images: nothing said there
    monkeypatch.setattr(reset_ppo_module, "machine_load", lambda: load)
    env = make_vec_env(env_id, n_envs=2, seed=0)
    model = ResetPPO(policy, env, n_steps=16, batch_size=16, n_epochs=1, policy_kwargs=dict(lstm_hidden_size=hidden))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model._warn_about_threads()
    found = [str(warning.message) for warning in _thread_warnings(caught)]
    if says is None:
        assert found == []
        return
    (message,) = found
    assert says in message and "Fix: call torch.set_num_threads(1) before training" in message and "\n" not in message


def test_the_advice_quotes_the_performance_pages_measurements() -> None:
    def cell(measured: tuple[float, float | None]) -> str:
        return f"{measured[0]:.2f} to {'more than 5' if measured[1] is None else f'{measured[1]:.2f}'}"

    page = (ROOT / "docs" / "studies" / "performance.md").read_text()
    for measurement in THREAD_MEASUREMENTS.values():
        assert f"| {measurement.label} | {cell(measurement.idle)} | {cell(measurement.busy)} |" in page


def test_the_zoo_trains_and_enjoys_with_one_thread_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    train = ["train", "--algo", "reset_ppo", "--env", "CueRecall-v0"]
    assert with_default_threads(train) == [*train, "--num-threads", "1"]
    assert with_default_threads(["enjoy", "--algo", "reset_ppo"])[-2:] == ["--num-threads", "1"]
    # The zoo's own flag (any prefix argparse accepts, with or without "="), -1 for torch's default, is kept
    for given in (["--num-threads", "4"], ["--num-threads=-1"], ["--nu", "2"], ["--num-t=3"]):
        assert with_default_threads([*train, *given]) == [*train, *given]
    for other in (["plot_train", "-a", "reset_ppo"], ["train", "--help"], []):
        assert with_default_threads(other) == other
    # main() passes it to the zoo's command line
    import rl_zoo3.train

    import sb3_reset_ppo.zoo

    seen: list[list[str]] = []
    monkeypatch.setattr(rl_zoo3.train, "train", lambda: seen.append(list(sys.argv)))
    sb3_reset_ppo.zoo.main(train)
    assert seen[0][-2:] == ["--num-threads", "1"]
