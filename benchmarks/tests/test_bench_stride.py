"""
The window-stride study (``benchmarks/speed/bench_stride.py``): settings, jobs with an equal time budget, its summary and
comparisons (no training).
"""

from bench_helpers import _load


def test_stride_study_settings_jobs_and_equal_time_budget() -> None:
    bench = _load("bench_stride")
    settings = bench.zoo_settings("CartPoleNoVel-v1")
    # ppo_lstm.yml's CartPoleNoVel-v1 entry, as constructor arguments
    assert (settings["n_envs"], settings["n_timesteps"], settings["normalize"]) == (8, 100_000, True)
    kwargs = settings["kwargs"]
    assert (kwargs["n_steps"], kwargs["batch_size"], kwargs["n_epochs"]) == (32, 256, 20)
    assert callable(kwargs["learning_rate"]) and kwargs["learning_rate"](1.0) == 1e-3
    assert kwargs["policy_kwargs"]["lstm_hidden_size"] == 64
    # Whole rollouts (8 envs x 32 steps)
    jobs = bench._jobs(["CartPoleNoVel-v1"], bench.VARIANTS, 1, [])
    assert {job["variant"] for job in jobs} == {"recurrent_ppo", "reset", "reset_stride1"}
    assert all(job["timesteps"] == 100_096 for job in jobs)
    # The equal-time run gets the steps that fit in stride 1's CPU time, once both runs are done
    done = [
        {"env": "CartPoleNoVel-v1", "variant": "reset", "seed": 0, "timesteps": 100_096, "cpu_seconds": 50.0},
        {"env": "CartPoleNoVel-v1", "variant": "reset_stride1", "seed": 0, "timesteps": 100_096, "cpu_seconds": 200.0},
    ]
    jobs = bench._jobs(["CartPoleNoVel-v1"], bench.VARIANTS, 1, done)
    assert [(job["variant"], job["timesteps"]) for job in jobs] == [("recurrent_ppo", 100_096), ("reset_equal_time", 400_384)]


def test_stride_study_summary() -> None:
    bench = _load("bench_stride")
    rows = [
        {"env": "CueRecall-v0", "variant": "reset", "seed": seed, "timesteps": 1024, "eval_return": 0.9 + 0.1 * seed,
         "last10_return": 0.8, "mean_return_over_training": 0.5, "cpu_seconds": 10.0 + seed, "wall_seconds": 12.0}
        for seed in range(2)
    ]  # fmt: skip
    table = bench.summary(rows, ["CueRecall-v0"])
    assert "| CueRecall-v0 | reset | 2 | 1,024 | 0.950 +- 0.071 | 0.800 +- 0.000 | 0.500 +- 0.000 | 10 | 12 |" in table


def test_stride_study_comparisons_report_differences_and_welch_p() -> None:
    bench = _load("bench_stride")
    rows = [
        {"env": "CueRecall-v0", "variant": variant, "seed": seed, "eval_return": value + 0.01 * seed,
         "last10_return": value, "mean_return_over_training": value}
        for variant, value in (("reset", 0.9), ("recurrent_ppo", 0.5))
        for seed in range(3)
    ]  # fmt: skip
    table = bench.comparisons(rows, ["CueRecall-v0"])
    line = next(row for row in table.splitlines() if "reset - recurrent_ppo" in row)
    # A difference of 0.4 with tiny (or no) spread: significant
    assert line == "| CueRecall-v0 | reset - recurrent_ppo | +0.4 (0.00) | +0.4 (0.00) | +0.4 (0.00) |"
    assert "reset_stride1" not in table  # no runs: no row
