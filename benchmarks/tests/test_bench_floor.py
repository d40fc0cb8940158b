"""benchmarks/speed/bench_floor.py's stored results and the performance page's tables of them (issue 52)."""

import argparse
import json
import re
import statistics

import torch as th
from bench_helpers import ROOT, _load

RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "studies" / "performance.md"
ROW = re.compile(r"\| (MLP|image|zoo|README snippet)")


def floor_section() -> str:
    return PAGE.read_text().split("## Per update against the floor")[1].split("\n## ")[0]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_performance_page_states_the_stored_floor_measurements() -> None:
    # Every row of the floor table is the stored run's: seconds per update, the ratios (with and without resets) and
    # the learn() ratio, in the order of the stored settings
    after = json.loads((RESULTS / "bench_floor.json").read_text())["results"]
    table = floor_section().split("Seconds are per update.")[0]
    rows = [line for line in table.splitlines() if ROW.match(line)]
    assert len(rows) == len(after) == 10
    for line, row in zip(rows, after, strict=True):
        seconds = row["seconds_per_update"]
        expected = [
            f"{seconds['floor']:.3f}", f"{seconds['reset']:.3f}", f"{seconds['recurrent_ppo']:.3f}",
            f"{row['reset_over_floor']:.2f}", f"{row['reset_without_resets_over_floor']:.2f}",
            f"{row['recurrent_ppo_over_floor']:.2f}", f"{row['reset_over_recurrent_ppo']:.2f}", f"{row['learn_ratio']:.2f}",
        ]  # fmt: skip
        assert cells(line)[1:] == expected, line


def test_the_paired_before_and_after_table_is_the_stored_runs() -> None:
    # The alternating runs of the code before and after issue 52's changes: each run's ResetPPO / floor, the medians
    # and their ratio, per setting
    runs = {
        code: [json.loads((RESULTS / "bench_floor_paired" / f"{code}_{i}.json").read_text())["results"] for i in (1, 2, 3)]
        for code in ("before", "after")
    }
    table = floor_section().split("Before and after, side by side.")[1].split("Against the issue's targets:")[0]
    rows = [line for line in table.splitlines() if ROW.match(line)]
    settings = [result["setting"] for result in runs["after"][0]]
    assert len(rows) == len(settings) == 3
    for line, setting in zip(rows, settings, strict=True):
        ratios = {
            code: [next(r["reset_over_floor"] for r in run if r["setting"] == setting) for run in code_runs]
            for code, code_runs in runs.items()
        }
        medians = {code: statistics.median(values) for code, values in ratios.items()}
        expected = [
            ", ".join(f"{value:.2f}" for value in ratios["before"]),
            ", ".join(f"{value:.2f}" for value in ratios["after"]),
            f"{medians['before']:.2f} to {medians['after']:.2f}",
            f"{medians['before'] / medians['after']:.2f}",
        ]
        assert cells(line)[1:] == expected, line


def test_the_snippet_learn_ratio_on_the_page_is_the_stored_run() -> None:
    # learn() over the README snippet's own 40,000 steps (78 rollouts), both classes, 3 interleaved repeats
    stored = json.loads((RESULTS / "bench_floor_snippet_learn.json").read_text())
    assert stored["settings"]["learn_rollouts"] == 78 and stored["settings"]["learn_repeats"] == 3
    (result,) = stored["results"]
    assert result["setting"] == "snippet"
    assert f"{result['learn_ratio']:.2f} over the snippet's own 40,000" in floor_section()
    # The README's intro quotes it for its own quick start
    assert f"and {result['learn_ratio']:.2f} on the quick start below" in (ROOT / "README.md").read_text()


def test_the_sampler_share_on_the_page_is_the_stored_run() -> None:
    # benchmarks/speed/bench_sampler.py's stored table: the zoo setting's train() and sampler milliseconds per update
    stored = (RESULTS / "bench_sampler.txt").read_text()
    rows = {cells(line)[0]: cells(line) for line in stored.splitlines() if line.startswith("| ") and "---" not in line}
    _, train, _, plan_share, minibatches, share = rows["zoo"]
    gap = floor_section().split("What the remaining gap consists of")[1]
    assert f"{minibatches} ms of {train}, of which `plan_epoch` {plan_share}" in gap
    assert f"{round(float(share.rstrip('%')))}% when timed alone" in gap


def test_the_attention_floor_is_the_policys_transformer_in_plain_torch() -> None:
    # The floor of attention memory computes what the policy's TransformerXL computes on a window without episode
    # starts and with full memory: the same weights give the same outputs
    from sb3_reset_ppo.common.attention import TransformerXL, attention_mask

    bench = _load("bench_floor")
    rows, width, n_features = 3, 5, 6
    attention = dict(n_layers=2, n_heads=2, memory_length=4)
    transformer = TransformerXL(n_features, dim=8, n_layers=2, n_heads=2, memory_length=4)
    floor = bench.FloorTransformer(n_features, 8, **attention)
    floor.load_state_dict(transformer.state_dict())
    batch = bench.FloorMinibatch((n_features,), 2, 8, rows, width, rows * width, "trxl", attention)
    slots = batch.observations[batch.slot_steps].reshape(rows, width, n_features)
    allowed = attention_mask(th.zeros(rows, width), th.full((rows,), 4), 4)
    expected, _ = transformer(slots, batch.memory[0], allowed)
    th.testing.assert_close(floor(slots, batch.memory[0], batch.bias, batch.distance), expected, rtol=1e-5, atol=1e-6)


def test_bench_floor_times_each_memory_against_its_floor() -> None:
    # GRU and attention rows: ResetPPO's train() against the floor of its own memory; RecurrentPPO has only the LSTM
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1)

    bench = _load("bench_floor")
    args = argparse.Namespace(n_steps=16, n_epochs=1, memory_length=4, seed=0, repeats=1, learn_repeats=1, learn_rollouts=1)
    for cell, policy in (("gru", "MlpGruPolicy"), ("trxl", "MlpTrXLPolicy")):
        result = bench.bench_setting("mlp:8:16", args, cell)
        assert result["cell"] == cell and result["policy"] == policy
        assert set(result["seconds_per_update"]) == {"floor", "reset", "reset_without_resets"}
        assert result["reset_over_floor"] > 0 and result["recurrent_ppo_over_floor"] is None
        assert set(result["learn_seconds"]) == {"reset"} and result["learn_ratio"] is None
        assert result["memory_length"] == (4 if cell == "trxl" else None)


def test_stored_attention_rows_are_within_the_bound_and_on_the_page() -> None:
    # Attention memory per update within 1.5 times its floor, beside LSTM and GRU at the same window; the page's table
    # is the stored runs
    section = PAGE.read_text().split("## Attention memory beside LSTM and GRU")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    # Every run of bench_floor.py --cells, in the order of their files' names
    stored = [
        result
        for path in sorted(RESULTS.glob("bench_floor_cells*.json"))
        for result in json.loads(path.read_text())["results"]
    ]
    assert {r["cell"] for r in stored} == {"lstm", "gru", "trxl"}
    for result in stored:
        if result["cell"] == "trxl":
            assert result["reset_over_floor"] <= 1.5, result["setting"]
    table = [cells(line) for line in rows[: len(stored)]]
    assert len(table) == len(stored)
    for line, result in zip(table, stored, strict=True):
        seconds = result["seconds_per_update"]
        assert line[2:6] == [
            f"{seconds['floor']:.3f}",
            f"{seconds['reset']:.3f}",
            f"{result['reset_over_floor']:.2f}",
            f"{result['learn_seconds']['reset']:.2f}",
        ], line
