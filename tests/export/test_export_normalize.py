"""
VecNormalize in the exported graph: a model trained under SB3's ``VecNormalize`` exports with its
observation statistics (the object, or the RL Zoo's ``vecnormalize.pkl``, found beside a zoo model by default), and
the file, fed the env's raw observations, plays step by step as ``predict`` on the normalised ones (clipping and a
Dict's ``norm_obs_keys`` included); a model known to be trained under one and exported without it warns.
"""

import collections
import functools
import json
import pickle
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import pytest
import yaml
from export_matrix import feed, parse
from gymnasium import spaces
from helpers import RandomEpisodeEnv
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
from test_export import ROOT, randomise, session, tiny_kwargs

from sb3_reset_ppo import ResetPPO
from sb3_reset_ppo.export import export_onnx, export_spec, read_metadata
from sb3_reset_ppo.export.__main__ import main as export_main
from sb3_reset_ppo.export.normalize import find_vec_normalize, zoo_config_normalizes

pytest.importorskip("onnxruntime")

N_ENVS = 3
N_STEPS = 24
# Observations whose means and scales differ per entry: the statistics matter
OFFSET_BOX = spaces.Box(np.array([0.0, -10.0, 2.0], np.float32), np.array([4.0, -2.0, 3.0], np.float32))


def make_env(obs_kind: str, action_space: spaces.Space, seed: int) -> gym.Env:
    env = RandomEpisodeEnv(action_space, "dict" if obs_kind == "dict" else "box", max_length=6)
    if obs_kind == "offset":
        env.observation_space = OFFSET_BOX
    env.reset(seed=seed)
    return env


def normalised_env(obs_kind: str, action_space: spaces.Space, seed: int, clip_obs: float = 1.0) -> VecNormalize:
    """``N_ENVS`` envs under a ``VecNormalize`` whose statistics come from 300 random steps, then frozen."""
    venv = DummyVecEnv([functools.partial(make_env, obs_kind, action_space, seed + index) for index in range(N_ENVS)])
    keys = ["vec"] if obs_kind == "dict" else None
    env = VecNormalize(venv, norm_reward=False, clip_obs=clip_obs, norm_obs_keys=keys)
    env.reset()
    for _ in range(300 // N_ENVS):
        env.step(np.array([action_space.sample() for _ in range(N_ENVS)]))
    env.training = False
    return env


def play_raw_beside_predict(model: ResetPPO, path: Path, env: VecNormalize, layout: str) -> int:
    """
    Play ``env`` with ``predict(deterministic=True)`` on its normalised observations and the file beside it on the raw
    ones (``get_original_obs``), on its own memory; assert the same actions and memory every step.

    :return: Observation entries that VecNormalize clipped (the clipping was exercised when > 0)
    """
    sess = session(path)
    names = [output.name for output in sess.get_outputs()]
    spec = export_spec(model, layout)
    obs: Any = env.reset()
    memory = [np.zeros((spec.n_layers, N_ENVS, spec.hidden_size), np.float32) for _ in range(spec.n_memory)]
    state: tuple[np.ndarray, ...] | None = None
    episode_start = np.ones(N_ENVS, dtype=bool)
    clipped = starts = 0
    for step in range(N_STEPS):
        raw = env.get_original_obs()
        actions, state = model.predict(obs, state, episode_start, deterministic=True)
        assert state is not None
        outputs = sess.run(None, feed(layout, spec, model.observation_space, raw, memory, episode_start, None))
        action, memory = parse(layout, spec, dict(zip(names, outputs, strict=True)), actions.shape)
        if spec.branches:
            np.testing.assert_array_equal(action, actions, err_msg=f"step {step}")
        else:
            np.testing.assert_allclose(action, actions, rtol=0, atol=1e-5, err_msg=f"step {step}")
        for ours, theirs in zip(memory, state, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5, err_msg=f"step {step}")
        normalised = obs["vec"] if isinstance(obs, dict) else obs
        clipped += int((np.abs(normalised) >= env.clip_obs).sum())
        obs, _, episode_start, _ = env.step(actions)
        starts += int(episode_start.sum())
    assert starts >= N_ENVS
    return clipped


@pytest.mark.parametrize(
    ("policy", "obs_kind", "action_space", "layout", "from_file"),
    [
        ("MlpLstmPolicy", "offset", spaces.Discrete(3), "plain", False),
        ("MultiInputGruPolicy", "dict", spaces.Box(-1.0, 1.0, (2,)), "mlagents", True),
        ("MlpGruPolicy", "offset", spaces.MultiDiscrete([2, 3]), "godot", True),
    ],
    ids=["Lstm-box-plain-object", "Gru-dict-norm_obs_keys-mlagents-pickle", "Gru-box-godot-pickle"],
)
def test_raw_observations_give_predicts_actions_on_normalised_ones(
    policy: str, obs_kind: str, action_space: spaces.Space, layout: str, from_file: bool, tmp_path: Path
) -> None:
    env = normalised_env(obs_kind, action_space, seed=0)
    kind = policy.removesuffix("LstmPolicy").removesuffix("GruPolicy")
    cell = "Lstm" if "Lstm" in policy else "Gru"
    model = ResetPPO(policy, env, n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs(cell, 2, kind), seed=0)
    randomise(model)
    vec_normalize: VecNormalize | Path = env
    if from_file:
        env.save(str(tmp_path / "vecnormalize.pkl"))
        vec_normalize = tmp_path / "vecnormalize.pkl"
    path = export_onnx(model, tmp_path / "normalised.onnx", layout=layout, vec_normalize=vec_normalize)
    # The same statistics on other episodes
    played = normalised_env(obs_kind, action_space, seed=20)
    played.obs_rms = env.obs_rms
    clipped = play_raw_beside_predict(model, path, played, layout)
    assert clipped > 0, "no observation reached clip_obs: the clipping was not exercised"


def test_metadata_says_what_is_in_the_graph(tmp_path: Path) -> None:
    env = normalised_env("dict", spaces.Discrete(2), seed=0, clip_obs=5.0)
    model = ResetPPO(
        "MultiInputLstmPolicy", env, n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs("Lstm", 1, "MultiInput")
    )
    env.save(str(tmp_path / "vecnormalize.pkl"))
    metadata = read_metadata(export_onnx(model, tmp_path / "m.onnx", vec_normalize=tmp_path / "vecnormalize.pkl"))
    entry = json.loads(metadata["vec_normalize"])
    assert entry["in_graph"] is True
    assert entry["source"] == str(tmp_path / "vecnormalize.pkl")
    assert (entry["keys"], entry["clip_obs"], entry["epsilon"]) == (["vec"], 5.0, env.epsilon)
    assert "clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)" in entry["formula"]
    assert (
        json.loads(read_metadata(export_onnx(model, tmp_path / "m.onnx", vec_normalize=env))["vec_normalize"])["source"]
        == "object"
    )
    # Rewards-only normalisation: nothing in the graph
    env.norm_obs = False
    assert json.loads(read_metadata(export_onnx(model, tmp_path / "m.onnx", vec_normalize=env))["vec_normalize"]) == {
        "in_graph": False
    }


def test_a_model_trained_under_vec_normalize_warns_without_it(tmp_path: Path) -> None:
    env = normalised_env("offset", spaces.Discrete(2), seed=0)
    model = ResetPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs("Lstm", 1, "Mlp"))
    with pytest.warns(UserWarning, match=r"trained on normalised observations.*vec_normalize=model.get_vec_normalize_env"):
        export_onnx(model, tmp_path / "m.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        export_onnx(model, tmp_path / "m.onnx", vec_normalize=model.get_vec_normalize_env())
        env.norm_obs = False
        export_onnx(model, tmp_path / "m.onnx")


def test_statistics_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    model = ResetPPO(
        "MlpLstmPolicy",
        DummyVecEnv([lambda: make_env("offset", spaces.Discrete(2), 0)]),
        n_steps=16,
        batch_size=16,
        policy_kwargs=tiny_kwargs("Lstm", 1, "Mlp"),
    )
    other = VecNormalize(DummyVecEnv([lambda: RandomEpisodeEnv(spaces.Discrete(2), "dict")]), norm_obs_keys=["vec"])
    with pytest.raises(ValueError, match=r"statistics of a Dict observation \(keys \['vec'\]\).*trained with"):
        export_onnx(model, tmp_path / "x.onnx", vec_normalize=other)
    wider = VecNormalize(DummyVecEnv([lambda: RandomEpisodeEnv(spaces.Discrete(2), "box")]))
    assert isinstance(wider.obs_rms, RunningMeanStd)
    wider.obs_rms.mean = np.zeros(4)
    with pytest.raises(
        ValueError, match=re.escape("statistics of observation 'obs' have shape (4,), the policy's space (3,)")
    ):
        export_onnx(model, tmp_path / "x.onnx", vec_normalize=wider)
    with pytest.raises(
        ValueError, match=r"vec_normalize must be the path of a VecNormalize pickle, got '.*none.pkl': no such"
    ):
        export_onnx(model, tmp_path / "x.onnx", vec_normalize=tmp_path / "none.pkl")
    (tmp_path / "other.pkl").write_bytes(pickle.dumps({"mean": 0}))
    with pytest.raises(ValueError, match=r"other.pkl' holds a dict, not a VecNormalize"):
        export_onnx(model, tmp_path / "x.onnx", vec_normalize=tmp_path / "other.pkl")
    with pytest.raises(TypeError, match=r"vec_normalize must be a VecNormalize, the path of its pickle.*got int"):
        export_onnx(model, tmp_path / "x.onnx", vec_normalize=3)


# ---------------------------------------------------------------------------------------------- the RL Zoo's layout


def zoo_run(tmp_path: Path, normalize: Any = True, with_pickle: bool = True) -> tuple[Path, VecNormalize, ResetPPO]:
    """A run folder as the RL Zoo leaves it: ``<run>/<env>.zip``, ``<run>/<env>/config.yml`` and ``vecnormalize.pkl``."""
    env_id = "CueRecall-v0"
    run = tmp_path / "reset_ppo" / f"{env_id}_1"
    (run / env_id).mkdir(parents=True)
    env = normalised_env("offset", spaces.Discrete(3), seed=0)
    model = ResetPPO("MlpLstmPolicy", env, n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs("Lstm", 1, "Mlp"), seed=0)
    randomise(model)
    model.save(run / f"{env_id}.zip")
    # The zoo dumps its hyperparameters as an OrderedDict (rl_zoo3's ExperimentManager)
    config = collections.OrderedDict([("n_envs", 8), ("normalize", normalize), ("policy", "MlpLstmPolicy")])
    (run / env_id / "config.yml").write_text(yaml.dump(config))
    if with_pickle:
        env.save(str(run / env_id / "vecnormalize.pkl"))
    return run / f"{env_id}.zip", env, model


def test_command_line_finds_the_zoo_file_beside_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zip_path, env, _ = zoo_run(tmp_path)
    pickle_path = zip_path.parent / "CueRecall-v0" / "vecnormalize.pkl"
    assert find_vec_normalize(zip_path) == pickle_path
    # best_model.zip and checkpoints share the run's statistics, as the zoo's enjoy pairs them
    assert find_vec_normalize(zip_path.parent / "best_model.zip") == pickle_path
    export_main([str(zip_path), str(tmp_path / "found.onnx")])
    assert f"VecNormalize {pickle_path} in the graph" in capsys.readouterr().out
    assert json.loads(read_metadata(tmp_path / "found.onnx")["vec_normalize"])["source"] == str(pickle_path)
    played = normalised_env("offset", spaces.Discrete(3), seed=30)
    played.obs_rms = env.obs_rms
    play_raw_beside_predict(ResetPPO.load(zip_path), tmp_path / "found.onnx", played, "plain")
    # --no-vec-normalize: none, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        export_main([str(zip_path), str(tmp_path / "none.onnx"), "--no-vec-normalize"])
    assert json.loads(read_metadata(tmp_path / "none.onnx")["vec_normalize"]) == {"in_graph": False}
    # --vec-normalize PATH: that one
    other = tmp_path / "elsewhere.pkl"
    other.write_bytes(pickle_path.read_bytes())
    export_main([str(zip_path), str(tmp_path / "given.onnx"), "--vec-normalize", str(other)])
    assert json.loads(read_metadata(tmp_path / "given.onnx")["vec_normalize"])["source"] == str(other)
    with pytest.raises(SystemExit) as exit_info:
        export_main([str(zip_path), str(tmp_path / "x.onnx"), "--vec-normalize", str(tmp_path / "missing.pkl")])
    assert exit_info.value.code == 2
    assert "missing.pkl': no such file" in capsys.readouterr().err


def test_command_line_warns_when_the_zoo_normalised_and_no_file_is_found(tmp_path: Path) -> None:
    zip_path, _, _ = zoo_run(tmp_path, with_pickle=False)
    with pytest.warns(UserWarning, match=r"config.yml beside .* says normalize, but no vecnormalize.pkl was found"):
        export_main([str(zip_path), str(tmp_path / "m.onnx")])
    assert json.loads(read_metadata(tmp_path / "m.onnx")["vec_normalize"]) == {"in_graph": False}


def test_the_zoo_config_is_read_as_the_zoo_reads_it(tmp_path: Path) -> None:
    for normalize, expected in [
        (True, True),
        (False, False),
        ("dict(norm_obs=False, norm_reward=True)", False),
        ("{'norm_obs': True, 'norm_reward': False}", True),
        ({"norm_obs": False}, False),
        ("dict(gamma=some_name)", True),
    ]:
        run = tmp_path / str(abs(hash(repr(normalize))))
        zip_path, _, _ = zoo_run(run, normalize=normalize, with_pickle=False)
        assert zoo_config_normalizes(zip_path) is expected, normalize
    assert zoo_config_normalizes(tmp_path / "elsewhere" / "model.zip") is False


# ---------------------------------------------------------------------------------------------- through the RL Zoo


def _zoo(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sb3_reset_ppo.zoo", *args], capture_output=True, text=True, timeout=600, cwd=cwd, check=False
    )


@pytest.mark.slow
def test_zoo_model_with_normalize_plays_the_zoos_own_returns(tmp_path: Path) -> None:
    """
    A model the RL Zoo trains with ``normalize: true`` (CartPoleNoVel-v1's setting in the package's hyperparameters)
    exports from its run folder (the zoo's ``vecnormalize.pkl`` found beside it) and plays through onnxruntime, on
    the raw observations, to the very episode returns of the zoo's own ``enjoy`` on the same seed.
    """
    env_id, seed, steps = "CartPoleNoVel-v1", 7, 400
    train = _zoo(
        "train", "--algo", "reset_ppo", "--env", env_id, "-n", "1024", "-f", str(tmp_path), "--seed", "1",
        "--eval-freq", "-1", "--hyperparams", "n_envs:2", "n_steps:32", "batch_size:64", "n_epochs:2",
        "policy_kwargs:dict(lstm_hidden_size=8, net_arch=[8])",
        cwd=tmp_path,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    run = tmp_path / "reset_ppo" / f"{env_id}_1"
    assert (run / env_id / "vecnormalize.pkl").is_file(), "the zoo did not normalise: the test would prove nothing"
    enjoy = _zoo(
        "enjoy", "--algo", "reset_ppo", "--env", env_id, "-f", str(tmp_path), "--exp-id", "1", "-n", str(steps),
        "--seed", str(seed), "--deterministic", "--no-render",
        cwd=tmp_path,
    )  # fmt: skip
    assert enjoy.returncode == 0, enjoy.stderr[-3000:]
    zoo_returns = [float(value) for value in re.findall(r"^Episode Reward: (\S+)$", enjoy.stdout, flags=re.MULTILINE)]
    assert len(zoo_returns) >= 3, enjoy.stdout[-2000:]
    export = subprocess.run(
        [sys.executable, "-m", "sb3_reset_ppo.export", str(run / f"{env_id}.zip"), str(tmp_path / "cart.onnx")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert export.returncode == 0, export.stderr
    assert json.loads(read_metadata(tmp_path / "cart.onnx")["vec_normalize"])["in_graph"] is True
    # The zoo's test env: make_vec_env(env_id, n_envs=1, seed=seed) (rl_zoo3's create_test_env), raw observations
    import rl_zoo3.import_envs  # noqa: F401  (registers the NoVel envs)
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(env_id, n_envs=1, seed=seed)
    sess = session(tmp_path / "cart.onnx")
    obs = env.reset()
    h = c = np.zeros((1, 1, 8), np.float32)
    episode_start = np.ones(1, np.float32)
    returns, total = [], 0.0
    for _ in range(steps):
        action, h, c = sess.run(None, {"obs": np.asarray(obs, np.float32), "h": h, "c": c, "episode_start": episode_start})
        obs, reward, done, _ = env.step(action)
        total += float(reward[0])
        episode_start = done.astype(np.float32)
        if done[0]:
            returns.append(round(total, 2))
            total = 0.0
    assert returns == zoo_returns


def test_float16_files_round_raw_observations_before_normalising(tmp_path: Path) -> None:
    """A float16 file takes raw observations as float16: it computes as the float32 file fed the observations rounded
    to float16, which moves observations of about 1000 +- 0.57 by up to 0.44 standard deviations
    (docs/guide/deploy_reference.md)."""
    mean, std = 1000.0, 0.57
    observation_space = spaces.Box(0.0, 2000.0, (4,), np.float32)

    def make() -> gym.Env:
        env = RandomEpisodeEnv(spaces.Discrete(3), max_length=6)
        env.observation_space = observation_space
        return env

    vec_normalize = VecNormalize(DummyVecEnv([make]))
    statistics = cast(RunningMeanStd, vec_normalize.obs_rms)  # a Box observation's
    statistics.mean, statistics.var = np.full(4, mean), np.full(4, std**2)
    model = ResetPPO("MlpLstmPolicy", vec_normalize, n_steps=16, batch_size=16, policy_kwargs=tiny_kwargs("Lstm", 1, "Mlp"))
    randomise(model)
    files = {
        dtype: session(export_onnx(model, tmp_path / f"{dtype}.onnx", dtype=dtype, vec_normalize=vec_normalize))
        for dtype in ("float32", "float16")
    }
    raw = mean + std * np.random.default_rng(0).standard_normal((256, 4))
    rounded = raw.astype(np.float16)
    shift = np.abs(rounded.astype(np.float64) - raw) / std
    assert 0.35 < shift.max() <= 0.25 / std + 1e-9

    def h_out(dtype: str, obs: np.ndarray) -> np.ndarray:
        hidden = np.zeros((1, len(obs), 8))
        numpy_dtype = np.float16 if dtype == "float16" else np.float32
        feed = {"obs": obs, "h": hidden, "c": hidden, "episode_start": np.ones(len(obs))}
        return files[dtype].run(["h_out"], {key: value.astype(numpy_dtype) for key, value in feed.items()})[0]

    float16 = h_out("float16", raw)
    # The float16 file is the float32 one on rounded observations (within float16's tolerance), not on the raw ones
    np.testing.assert_allclose(float16, h_out("float32", rounded.astype(np.float32)), atol=1e-2)
    assert np.abs(float16 - h_out("float32", raw)).max() > 2e-2
    assert "float16 files round raw observations" in (ROOT / "docs" / "guide" / "deploy.md").read_text()
    # The page this test's docstring cites states its figures: the spread, and the largest shift 0.25 / std
    docstring = test_float16_files_round_raw_observations_before_normalising.__doc__ or ""
    cited = re.search(r"\((docs/[\w/]+\.md)\)", docstring)
    assert cited is not None, docstring
    page = " ".join((ROOT / cited.group(1)).read_text().split())
    assert f"about {mean:.0f} with a standard deviation of {std}, up to 0.25, {0.25 / std:.2f} standard deviations" in page
