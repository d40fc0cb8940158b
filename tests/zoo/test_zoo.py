"""RL Zoo integration: reset_ppo and maskable_reset_ppo train, are evaluated and enjoyed through the zoo's own command line."""

import csv
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np
import optuna
import pytest
import yaml
from helpers import run_zoo_in_process

from sb3_reset_ppo import MaskableResetPPO, ResetPPO
from sb3_reset_ppo.common.maskable_evaluation import MaskableEvalCallback
from sb3_reset_ppo.experiments import runner, training_log
from sb3_reset_ppo.reset_ppo.trxl_policies import TrXLActorCriticPolicy
from sb3_reset_ppo.zoo import (
    DEFAULT_CONF_FILE,
    TRXL_CONF_FILE,
    MaskableTrialEvalCallback,
    _with_default_conf_file,
    convert_reset_ppo_params,
    masked_enjoy,
    masked_evaluation,
    register,
    sample_reset_ppo_params,
    timed,
    timed_evaluation,
)

# Runs the zoo's command line with the given arguments
Zoo = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def zoo(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Zoo:
    """The zoo's command line in this process (:func:`helpers.run_zoo_in_process`)."""
    return lambda *args: run_zoo_in_process(list(args), capfd, monkeypatch)


def _zoo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sb3_reset_ppo.zoo", *args], capture_output=True, text=True, timeout=300)


def test_train_writes_evaluations_and_enjoy_loads(tmp_path: Path, zoo: Zoo) -> None:
    result = zoo(
        "train", "--algo", "reset_ppo", "--env", "CueRecall-v0", "-n", "512", "--eval-freq", "256",
        "--eval-episodes", "2", "--n-eval-envs", "1", "-f", str(tmp_path), "--seed", "1",
        "--hyperparams", "n_steps:32", "boundary:'mask'", "window_size:8",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "reset_ppo" / "CueRecall-v0_1"
    evaluations = np.load(run / "evaluations.npz")
    # 8 envs (the config's), --eval-freq 256 steps (the zoo divides it by n_envs): after 256 and 512 steps
    assert evaluations["timesteps"].tolist() == [256, 512]
    assert evaluations["results"].shape == (2, 2)
    # The package's hyperparameter file was the default; command-line settings override it
    config = dict(yaml.unsafe_load((run / "CueRecall-v0" / "config.yml").read_text()))
    assert config["boundary"] == "mask" and config["window_size"] == 8 and config["n_steps"] == 32
    model = ResetPPO.load(run / "CueRecall-v0.zip")
    assert (model.boundary, model.window_size) == ("mask", 8)
    # The training log times the evaluations (the compare command subtracts them from learn()'s clock)
    rows = training_log.parse_tables(result.stdout)
    timed_rows = [row for row in rows if "time/fps" in row and runner.EVALUATION_SECONDS in row]
    assert timed_rows and timed_rows[-1][runner.EVALUATION_SECONDS] > 0
    enjoy = zoo("enjoy", "--algo", "reset_ppo", "--env", "CueRecall-v0", "-f", str(tmp_path), "-n", "30", "--no-render")
    assert enjoy.returncode == 0, enjoy.stderr[-3000:]


def test_train_attention_memory_from_its_packaged_config(tmp_path: Path, zoo: Zoo) -> None:
    hyperparams = yaml.safe_load(TRXL_CONF_FILE.read_text())
    assert hyperparams["CueRecall-v0"]["policy"] == "MlpTrXLPolicy"
    result = zoo(
        "train", "--algo", "reset_ppo", "--env", "CueRecall-v0", "-n", "512", "--conf-file", str(TRXL_CONF_FILE),
        "-f", str(tmp_path), "--seed", "1", "--hyperparams", "n_steps:32",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    model = ResetPPO.load(tmp_path / "reset_ppo" / "CueRecall-v0_1" / "CueRecall-v0.zip")
    # The config's attention policy, trained for two rollouts of 8 envs
    assert isinstance(model.policy, TrXLActorCriticPolicy) and model.policy.memory_shape == (8, 1, 32)
    assert model.num_timesteps == 512 and model._n_updates > 0


def test_default_conf_file_is_added_only_for_reset_ppo_training() -> None:
    assert _with_default_conf_file(["train", "--algo", "reset_ppo"])[-2:] == ["--conf-file", str(DEFAULT_CONF_FILE)]
    assert _with_default_conf_file(["train", "--algo", "reset_ppo", "-conf", "x.yml"]) == [
        "train",
        "--algo",
        "reset_ppo",
        "-conf",
        "x.yml",
    ]
    assert _with_default_conf_file(["train", "--algo", "ppo_lstm"]) == ["train", "--algo", "ppo_lstm"]
    assert _with_default_conf_file(["enjoy", "--algo", "reset_ppo"]) == ["enjoy", "--algo", "reset_ppo"]


def test_hyperparameter_file_covers_the_benchmark_envs() -> None:
    import rl_zoo3

    hyperparams = yaml.safe_load(DEFAULT_CONF_FILE.read_text())
    zoo = yaml.safe_load((Path(rl_zoo3.__file__).parent / "hyperparams" / "ppo_lstm.yml").read_text())
    evidence = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "benchmarks" / "studies" / "evidence" / "evidence.yml").read_text()
    )
    for env_id in (
        "CartPoleNoVel-v1",
        "PendulumNoVel-v1",
        "MountainCarContinuousNoVel-v0",
        "CueRecall-v0",
        "CueRecallImage-v0",
    ):
        settings = hyperparams[env_id]
        # ResetPPO's own defaults: no window setting in the shipped file
        assert not {"window_size", "window_stride", "window_coverage", "boundary", "weighting"} & set(settings)
    # The zoo's tuned ppo_lstm values verbatim where the zoo publishes them; the evidence study's settings elsewhere
    for env_id in ("CartPoleNoVel-v1", "PendulumNoVel-v1", "MountainCarContinuousNoVel-v0"):
        assert hyperparams[env_id] == zoo[env_id]
    for env_id in evidence:
        assert hyperparams[env_id] == evidence[env_id]


def test_optuna_sampler_adds_window_size_and_keeps_batch_size_in_transitions() -> None:
    register()
    from rl_zoo3 import hyperparams_opt
    from rl_zoo3.utils import ALGOS

    assert ALGOS["reset_ppo"] is ResetPPO and "ppo_lstm" in ALGOS
    assert hyperparams_opt.HYPERPARAMS_SAMPLER["reset_ppo"] is sample_reset_ppo_params
    raw = {
        "window_size": 16, "batch_size_pow": 8, "n_steps_pow": 7, "one_minus_gamma": 0.01, "one_minus_gae_lambda": 0.05,
        "learning_rate": 3e-4, "ent_coef": 1e-3, "clip_range": 0.2, "n_epochs": 5, "max_grad_norm": 0.5,
        "net_arch": "small", "activation_fn": "tanh",
    }  # fmt: skip
    params = sample_reset_ppo_params(
        cast(optuna.Trial, optuna.trial.FixedTrial(raw)), n_actions=2, n_envs=8, additional_args={}
    )
    assert params["window_size"] == 16 and params["n_steps"] == 128
    # batch_size_pow 8: 256 transitions, as ppo_lstm's sampler gives
    assert (
        params["batch_size"]
        == 256
        == hyperparams_opt.sample_ppo_lstm_params(cast(optuna.Trial, optuna.trial.FixedTrial(raw)), 2, 8, {})["batch_size"]
    )
    # Windows never exceed the rollout
    short_trial = optuna.trial.FixedTrial({**raw, "n_steps_pow": 3, "window_size": 32})
    short = sample_reset_ppo_params(cast(optuna.Trial, short_trial), 2, 8, {})
    assert short["window_size"] == 8
    assert convert_reset_ppo_params(raw)["batch_size"] == 256
    # The default window, min(batch_size, n_steps), is one of the choices, kept as the setting ResetPPO resolves
    derived = sample_reset_ppo_params(cast(optuna.Trial, optuna.trial.FixedTrial({**raw, "window_size": "batch"})), 2, 8, {})
    assert (
        derived["window_size"] == "batch"
        and convert_reset_ppo_params({**raw, "window_size": "batch"})["window_size"] == "batch"
    )


@pytest.mark.slow
def test_optimize_runs_one_trial(tmp_path: Path, zoo: Zoo) -> None:
    result = zoo(
        "train", "--algo", "reset_ppo", "--env", "CueRecall-v0", "-n", "256", "-optimize", "--n-trials", "1",
        "--n-jobs", "1", "--sampler", "random", "--pruner", "none", "--n-evaluations", "1", "--eval-episodes", "2",
        "-f", str(tmp_path), "--seed", "2", "--hyperparams", "n_envs:2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    reports = list((tmp_path / "reset_ppo").glob("report_CueRecall-v0_1-trials-256-random-none_*"))
    assert reports, result.stdout[-2000:]


def test_help_and_unknown_script_give_usage_not_tracebacks(capsys: pytest.CaptureFixture[str]) -> None:
    # No arguments and --help through main() in this process (an interpreter start that imports the RL Zoo is seconds
    # of CPU); the unknown script below through `python -m`, the way users meet all three
    from sb3_reset_ppo.zoo import main

    exits: dict[tuple[str, ...], str | int | None] = {}
    for args in ((), ("--help",)):
        with pytest.raises(SystemExit) as stopped:
            main(list(args))
        out, err = capsys.readouterr()
        exits[args] = stopped.value.code
        assert "usage: python -m sb3_reset_ppo.zoo {train,enjoy," in (err if not args else out)
        assert "Traceback" not in err
    assert exits[("--help",)] == 0 and exits[()] == 2
    # Every script we list is one the zoo's command line knows, and main calls the function that it calls
    import importlib
    import inspect

    from rl_zoo3 import cli

    from sb3_reset_ppo.zoo import SCRIPT_MODULES, SCRIPTS

    assert all(f'"{script}":' in inspect.getsource(cli.main) for script in SCRIPTS)
    for script, module in SCRIPT_MODULES.items():
        assert getattr(importlib.import_module(module), script) is getattr(cli, script), (script, module)
    unknown = _zoo("trian")
    assert unknown.returncode == 1 and "unknown script 'trian'" in unknown.stderr and "Traceback" not in unknown.stderr


@pytest.mark.filterwarnings("ignore:batch_size=")  # small sampled batches are one window: said by a warning
def test_optuna_trials_cost_no_more_than_the_same_ppo_lstm_trial() -> None:
    # The same sampled settings (batch_size, n_steps, n_epochs) for both: ResetPPO's epoch trains at most as many
    # slots as RecurrentPPO's has transitions, in at most as many minibatches (gradient steps)
    from rl_zoo3 import hyperparams_opt
    from stable_baselines3.common.env_util import make_vec_env

    import sb3_reset_ppo.envs  # noqa: F401
    from sb3_reset_ppo.common.epochs import plan_epoch

    n_envs = 2
    env = make_vec_env("CueRecall-v0", n_envs=n_envs)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    checked = 0
    for _ in range(60):
        trial = study.ask()
        params = sample_reset_ppo_params(trial, 4, n_envs, {})
        same = {k: v for k, v in trial.params.items() if k != "window_size"}
        ppo_lstm = hyperparams_opt.sample_ppo_lstm_params(cast(optuna.Trial, optuna.trial.FixedTrial(same)), 4, n_envs, {})
        assert {k: params[k] for k in ("batch_size", "n_steps", "n_epochs")} == {
            k: ppo_lstm[k] for k in ("batch_size", "n_steps", "n_epochs")
        }
        # As the zoo merges them: the packaged config's entry (ResetPPO's default stride), then the sampled values,
        # whose window_stride (the default) would also override a config's window_stride: 1
        config = dict(yaml.safe_load(DEFAULT_CONF_FILE.read_text())["CueRecall-v0"])
        assert "window_stride" not in config and params["window_stride"] is None
        merged = {**config, "window_stride": 1, **params}
        settings = {k: merged[k] for k in ("n_steps", "batch_size", "n_epochs", "window_size", "window_stride")}
        for coverage in ("inside", "full"):
            model = ResetPPO("MlpLstmPolicy", env, window_coverage=coverage, **settings)
            window_size, batch_size, buffer = model.window_length, model.batch_size, model.rollout_buffer
            assert window_size <= params["n_steps"]
            transitions = n_envs * params["n_steps"]
            # Epochs as the buffer plans them: real slots, and minibatches (gradient steps)
            generator = np.random.default_rng(0)
            for _ in range(5):
                plan = plan_epoch(params["n_steps"], n_envs, buffer.window_settings, batch_size, 1, generator)
                assert int(plan.lengths.sum()) <= transitions
                assert plan.n_minibatches <= -(-transitions // batch_size)
        checked += 1
        study.tell(trial, 0.0)
    assert checked == 60


# maskable_reset_ppo: MaskableResetPPO in the zoo, evaluated and enjoyed with the env's action masks


def test_maskable_train_evaluates_with_masks_and_enjoy_uses_them(tmp_path: Path, zoo: Zoo) -> None:
    result = zoo(
        "train", "--algo", "maskable_reset_ppo", "--env", "MaskedCueRecall-v0", "-n", "512", "--eval-freq", "256",
        "--eval-episodes", "20", "--n-eval-envs", "1", "-f", str(tmp_path), "--seed", "1",
        "--hyperparams", "n_steps:32", "window_size:8",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "maskable_reset_ppo" / "MaskedCueRecall-v0_1"
    evaluations = np.load(run / "evaluations.npz")
    assert evaluations["timesteps"].tolist() == [256, 512] and evaluations["results"].shape == (2, 20)
    # Evaluated with masks: no episode ended by an invalid action (-1); the zoo's own EvalCallback (SB3's
    # evaluate_policy, no masks) ends nearly all of them so at this stage of training
    assert set(evaluations["results"].ravel().tolist()) <= {0.0, 1.0}
    # The package's hyperparameter file was the default: MaskedCueRecall-v0's entry, command-line settings on top
    config = dict(yaml.unsafe_load((run / "MaskedCueRecall-v0" / "config.yml").read_text()))
    packaged = yaml.safe_load(DEFAULT_CONF_FILE.read_text())["MaskedCueRecall-v0"]
    assert config["learning_rate"] == packaged["learning_rate"] and config["policy_kwargs"] == packaged["policy_kwargs"]
    assert config["n_steps"] == 32 and config["window_size"] == 8
    model = MaskableResetPPO.load(run / "MaskedCueRecall-v0.zip")
    assert type(model) is MaskableResetPPO and model.window_size == 8
    enjoy = zoo(
        "enjoy", "--algo", "maskable_reset_ppo", "--env", "MaskedCueRecall-v0", "-f", str(tmp_path), "-n", "100",
        "--no-render",
    )  # fmt: skip
    assert enjoy.returncode == 0, enjoy.stderr[-3000:]
    episode_rewards = [float(line.split(":")[1]) for line in enjoy.stdout.splitlines() if line.startswith("Episode Reward:")]
    # Enjoyed with masks too: about 20 episodes of 3 to 8 steps, none ended by an invalid action
    assert len(episode_rewards) >= 10 and set(episode_rewards) <= {0.0, 1.0}, enjoy.stdout[-2000:]


def test_maskable_reset_ppo_shares_reset_ppo_registration_and_conf_file() -> None:
    register()
    from rl_zoo3 import hyperparams_opt
    from rl_zoo3.utils import ALGOS

    assert ALGOS["maskable_reset_ppo"] is MaskableResetPPO
    assert hyperparams_opt.HYPERPARAMS_SAMPLER["maskable_reset_ppo"] is sample_reset_ppo_params
    assert hyperparams_opt.HYPERPARAMS_CONVERTER["maskable_reset_ppo"] is convert_reset_ppo_params
    assert _with_default_conf_file(["train", "--algo", "maskable_reset_ppo"])[-2:] == ["--conf-file", str(DEFAULT_CONF_FILE)]
    assert _with_default_conf_file(["train", "--algo=maskable_reset_ppo", "--conf-file=x.yml"])[-1] == "--conf-file=x.yml"
    # MaskedCueRecall-v0: CueRecall-v0's settings, with the masking study's budget (whole rollouts of 8 x 128)
    hyperparams = yaml.safe_load(DEFAULT_CONF_FILE.read_text())
    masked, unmasked = dict(hyperparams["MaskedCueRecall-v0"]), dict(hyperparams["CueRecall-v0"])
    assert masked.pop("n_timesteps") == 30 * 8 * 128 and {**unmasked, "n_timesteps": None} == {**masked, "n_timesteps": None}


def test_masked_evaluation_and_enjoy_replace_the_zoo_names_and_restore_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import rl_zoo3.enjoy as zoo_enjoy
    import rl_zoo3.exp_manager as zoo_exp_manager
    from rl_zoo3.callbacks import TrialEvalCallback
    from rl_zoo3.utils import ALGOS, create_test_env
    from stable_baselines3.common.callbacks import EvalCallback

    register()
    with masked_evaluation():
        assert zoo_exp_manager.EvalCallback is MaskableEvalCallback
        assert zoo_exp_manager.TrialEvalCallback is MaskableTrialEvalCallback
    assert zoo_exp_manager.EvalCallback is EvalCallback and zoo_exp_manager.TrialEvalCallback is TrialEvalCallback
    with pytest.raises(KeyError), masked_enjoy():
        assert zoo_enjoy.create_test_env is not create_test_env
        enjoyed = ALGOS["maskable_reset_ppo"]
        assert issubclass(enjoyed, MaskableResetPPO) and enjoyed is not MaskableResetPPO
        raise KeyError  # restored after an error too
    assert zoo_enjoy.create_test_env is create_test_env and ALGOS["maskable_reset_ppo"] is MaskableResetPPO
    # A zoo that builds its callbacks otherwise is refused loudly, not silently evaluated without masks
    monkeypatch.setattr(zoo_exp_manager, "EvalCallback", MaskableEvalCallback)
    with pytest.raises(RuntimeError, match=r"rl_zoo3\.exp_manager\.EvalCallback is no longer"), masked_evaluation():
        pass
    monkeypatch.setattr(zoo_enjoy, "create_test_env", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError, match=r"rl_zoo3\.enjoy\.create_test_env is no longer"), masked_enjoy():
        pass


def test_maskable_trial_eval_callback_reports_memory_keeping_masked_evaluations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers import CueMemoryFake
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    # A real model for the callback's bookkeeping, whose predict is a scripted policy that scores 1.0 only when it
    # gets the masks at every step and its state back (tests/common/test_maskable_evaluation.py)
    model = MaskableResetPPO("MlpLstmPolicy", make_vec_env("MaskedCueRecall-v0", n_envs=1), n_steps=16, batch_size=16)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    fake = CueMemoryFake()
    monkeypatch.setattr(model, "predict", fake.predict)
    study = optuna.create_study()
    trial = study.ask()
    callback = MaskableTrialEvalCallback(
        make_vec_env("MaskedCueRecall-v0", n_envs=2, seed=3), trial, n_eval_episodes=100, eval_freq=1
    )
    callback.init_callback(model)
    assert callback.on_step() and fake.calls > 0
    assert callback.last_mean_reward == 1.0 and callback.eval_idx == 1
    # Reported to the trial as the zoo's TrialEvalCallback does
    study.tell(trial, callback.last_mean_reward)
    assert study.trials[0].intermediate_values == {1: 1.0}


@pytest.mark.slow
def test_maskable_optimize_runs_one_trial_evaluated_with_masks(tmp_path: Path, zoo: Zoo) -> None:
    result = zoo(
        "train", "--algo", "maskable_reset_ppo", "--env", "MaskedCueRecall-v0", "-n", "256", "-optimize",
        "--n-trials", "1", "--n-jobs", "1", "--sampler", "random", "--pruner", "none", "--n-evaluations", "1",
        "--eval-episodes", "10", "-f", str(tmp_path), "--seed", "2", "--hyperparams", "n_envs:2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    reports = list((tmp_path / "maskable_reset_ppo").glob("report_MaskedCueRecall-v0_1-trials-256-random-none_*.csv"))
    assert reports, result.stdout[-2000:]
    with open(reports[0]) as file:
        rows = list(csv.DictReader(file))
    # The trial's value is its last masked evaluation: a mean of 0s and 1s, never an invalid action's -1
    assert len(rows) == 1 and 0.0 <= float(rows[0]["value"]) <= 1.0, rows


def test_timed_evaluations_log_their_seconds_into_the_next_training_row(tmp_path: Path) -> None:
    import rl_zoo3.exp_manager as zoo_exp_manager
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    env = make_vec_env("CueRecall-v0", n_envs=2, seed=0)
    policy_kwargs = {"lstm_hidden_size": 4, "net_arch": [4]}
    model = ResetPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0, policy_kwargs=policy_kwargs)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    # Three rollouts of 16 calls; one evaluation, at the 32nd call: the end of the second rollout
    callback = timed(EvalCallback)(make_vec_env("CueRecall-v0", n_envs=1, seed=1), eval_freq=32, n_eval_episodes=2)
    model.learn(96, callback=callback)
    with open(tmp_path / "progress.csv") as source:
        rows = [{key: float(value) for key, value in row.items() if value} for row in csv.DictReader(source)]
    seconds = [row.get(runner.EVALUATION_SECONDS) for row in rows if "time/fps" in row]
    # Only the training row after the evaluation has it: a row without it had no evaluation since the one before
    assert seconds[0] is None and seconds[1] == callback.evaluation_seconds > 0 and seconds[2] is None  # type: ignore[attr-defined]
    # The zoo's name is swapped for the timed class of what it holds, and restored
    with timed_evaluation():
        assert issubclass(zoo_exp_manager.EvalCallback, EvalCallback) and zoo_exp_manager.EvalCallback is not EvalCallback
    assert zoo_exp_manager.EvalCallback is EvalCallback
