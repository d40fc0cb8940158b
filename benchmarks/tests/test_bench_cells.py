"""benchmarks/speed/bench_cells.py: the two cells' forward and backward, and the GRU page's ratios from its stored run."""

import re
import sys
from pathlib import Path

import pytest
from bench_helpers import ROOT, _load

STORED = ROOT / "benchmarks" / "results" / "bench_cells.txt"
ROW = re.compile(r"^\| (\d+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", re.MULTILINE)


@pytest.mark.parametrize(("cell", "kind"), [("lstm", "LSTM"), ("gru", "GRU")])
def test_each_call_is_a_forward_and_backward_through_every_weight(cell: str, kind: str) -> None:
    bench = _load("bench_cells")
    rnn = bench.make_cell(cell, input_size=3, hidden=4)
    assert type(rnn).__name__ == kind and (rnn.input_size, rnn.hidden_size) == (3, 4)
    call = bench.step_function(rnn, steps=5, sequences=2)
    call()
    assert all(parameter.grad is not None and parameter.grad.abs().sum() > 0 for parameter in rnn.parameters())
    first = [parameter.grad.clone() for parameter in rnn.parameters()]
    call()  # the gradients are set anew, not accumulated: every call is the same work
    assert all(parameter.grad.equal(grad) for parameter, grad in zip(rnn.parameters(), first, strict=True))


def test_the_table_has_a_row_per_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _load("bench_cells")
    out = tmp_path / "cells.txt"
    monkeypatch.setattr(sys, "argv", ["bench_cells.py", "--repeats", "1", "--calls", "1", "--steps", "3", "--out", str(out)])
    bench.main()
    text = out.read_text()
    assert text.startswith("command: python benchmarks/speed/bench_cells.py --repeats 1 --calls 1 --steps 3 --out ")
    rows = ROW.findall(text)
    assert [(int(i), int(h)) for i, h, *_ in rows] == [(i, h) for i in bench.INPUT_SIZES for h in bench.HIDDEN_SIZES]
    for *_, lstm, gru, ratio in rows:
        # Each column is rounded to 2 decimals from the unrounded times, so the printed ratio lies within the ratios
        # that the printed times allow (each off by at most half a unit in the last place), rounded alike
        low, high = (float(gru) - 0.005) / (float(lstm) + 0.005), (float(gru) + 0.005) / (float(lstm) - 0.005)
        assert low - 0.005 <= float(ratio) <= high + 0.005, (lstm, gru, ratio)


def test_the_gru_page_states_the_stored_ratios() -> None:
    page = " ".join((ROOT / "docs" / "studies" / "gru.md").read_text().split())
    ratios = {(int(i), int(h)): ratio for i, h, _, _, ratio in ROW.findall(STORED.read_text())}
    stated = (
        f"{ratios[2, 64]} times the LSTM's CPU time at hidden size 64 and {ratios[2, 256]} times at 256 with the MLP "
        f"settings' 2 inputs, {ratios[512, 64]} times at 64 with the image settings' 512 inputs, {ratios[512, 256]} times "
        "at 256; `python benchmarks/speed/bench_cells.py`, `benchmarks/results/bench_cells.txt`"
    )
    assert stated in page
    load = re.search(r"load average: ([\d.]+) before, ([\d.]+) after", STORED.read_text())
    assert load is not None
    low, high = sorted(float(value) for value in load.groups())
    assert f"load average of {low:.1f} to {high:.1f} on 2 cores" in page
