"""benchmarks/speed/bench_memory.py --attention: what attention memory stores, its stored results and their table."""

import json

from bench_helpers import ROOT

RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "studies" / "performance.md"
N_LAYERS, FLOAT_BYTES = 2, 4


def test_stored_attention_memory_grows_with_steps_layers_and_width_not_with_k_per_step() -> None:
    stored = json.loads((RESULTS / "bench_memory_attention.json").read_text())
    width = stored["settings"]["trxl_dim"]
    trxl = [r for r in stored["results"] if r["cell"] == "trxl"]
    assert len({r["memory_length"] for r in trxl}) == 2 and len({r["steps"] for r in trxl}) == 2
    for r in trxl:
        # Actor and critic: E (K + T) positions of (L, D) floats, the K entering the rollout and one per step
        positions = r["n_envs"] * (r["memory_length"] + r["n_steps"])
        assert r["stored_memory_bytes"] == 2 * positions * N_LAYERS * width * FLOAT_BYTES
        # A copy of the K positions per step would take K times the steps' share
        assert r["k_copies_bytes"] == 2 * r["steps"] * r["memory_length"] * N_LAYERS * width * FLOAT_BYTES
        assert r["train_peak_extra_bytes"] < r["k_copies_bytes"]
    # The page's table is the stored run
    section = PAGE.read_text().split("## Attention memory beside LSTM and GRU")[1].split("\n## ")[0]
    mib = 2**20
    for r in stored["results"]:
        row = (
            f"| {r['cell']} | {r['memory_length'] or '-'} | {r['steps']} | {r['stored_memory_bytes'] / mib:.2f} "
            f"| {r['stored_memory_bytes_per_step']:.0f} |"
        )
        assert row in section, row
