"""
The evidence study's reports (``benchmarks/studies/evidence/evidence_report.py``) and the protocol's claims and decisions
(``benchmarks/studies/evidence/decisions.py``), on synthetic grids and summaries.
"""

import json
from pathlib import Path
from typing import Any

import pytest
from bench_helpers import ROOT, _fake_run, _load

from benchmarks.kit.scripts import run_script


def test_evidence_report_writes_the_protocols_reports_and_readme_tables(tmp_path: Path) -> None:
    evidence_report = _load("evidence_report")
    grid, out_dir = tmp_path / "evidence", tmp_path / "out"
    for seed in range(2):
        _fake_run(grid, "ev_reset", "CueRecall-v0", seed, [0.2, 0.9, 1.0])
        _fake_run(grid, "ev_mask", "CueRecall-v0", seed, [0.2, 0.3, 0.4])
        _fake_run(grid, "ev_reset_stride1", "CueRecall-v0", seed, [0.2, 0.5, 0.6])
    # A secondary arm on an env the protocol does not run it on is not reported
    _fake_run(grid, "ev_reset_stride1", "PendulumNoVel-v1", 0, [-1000.0, -900.0, -800.0])
    # A run with fewer evaluations than every other (here 3 stand for the protocol's 20) is a failed run
    _fake_run(grid, "ev_mask", "CueRecallLong-v0", 0, [0.1, 0.2])

    def write_reports(*only: str) -> str:
        command = [
            "benchmarks/studies/evidence/evidence_report.py",
            "--out-dir",
            str(out_dir),
            "--summaries",
            str(out_dir / "results"),
        ]
        command += ["--evidence", str(grid), "--tuned", str(tmp_path / "missing"), "--min-seeds", "2", "--reps", "50"]
        command += ["--evaluations", "3", *(["--only", *only] if only else [])]
        return run_script(command, capture=True)

    assert "no finished tuned re-run" in write_reports() and not (out_dir / "RESULTS_tuned.md").exists()
    primary = (out_dir / "RESULTS.md").read_text()
    assert primary.startswith("# Evidence: reset-and-continue against masking")
    # The study's notes, then the other studies', before the tables
    assert primary.index("## Protocol, deviations and reading") < primary.index("## Other studies")
    assert primary.index("## Other studies") < primary.index("## Aggregate")
    assert "--final-evaluations 2" in primary and "`python benchmarks/kit/run_grid.py --study evidence" in primary
    # The report's command, quoted for a shell, with paths in the repository relative to its root
    assert (
        "--title 'Evidence: reset-and-continue against masking (benchmarks/studies/evidence/PROTOCOL.md, primary arms)'"
        in primary
    )
    assert "--notes benchmarks/studies/evidence/NOTES.md benchmarks/studies/evidence/OTHER_STUDIES.md" in primary
    assert evidence_report.repository_path(ROOT / "benchmarks") == Path("benchmarks")
    assert evidence_report.repository_path(tmp_path) == tmp_path.resolve()
    assert "| ev_reset | 2 | 0.950 +- 0.000 |" in primary and "| ev_reset_stride1 |" not in primary
    assert "ev_mask CueRecallLong-v0 seed 0 (2 evaluations within its budget, not 3)" in primary
    assert "### CueRecallLong-v0" not in primary
    secondary = (out_dir / "RESULTS_secondary.md").read_text()
    assert "| ev_reset_stride1 | 2 | 0.550 +- 0.000 |" in secondary and "PendulumNoVel-v1" not in secondary
    assert "ev_mask |" not in secondary
    summary = json.loads((out_dir / "results" / "evidence_primary_summary.json").read_text())
    assert summary["baseline"] == "ev_reset" and summary["aggregate"]["final"]["envs"] == ["CueRecall-v0"]
    tables = (out_dir / "results" / "evidence_readme_tables.md").read_text()
    assert "primary" in tables and "secondary" in tables and "`ev_mask`" in tables
    assert (out_dir / "figures" / "primary" / "aggregate.png").stat().st_size > 0
    # The protocol's rules applied to the summaries: a claim where the interval excludes 0.5, "undecided" where an
    # arm the rule needs has not run
    claims = (out_dir / "DECISIONS.md").read_text()
    assert "- primary report: seeds 0 to 1 of 1 env: an interim look, not the protocol's aggregate" in claims
    assert "- `ev_mask` is beaten by `ev_reset` (P(`ev_mask` > `ev_reset`) = 0.00 (0.00 to 0.00)" in claims
    assert "Interim look (see above)" in claims
    assert "- `ev_reset_stride1` is beaten by `ev_reset`" in claims and "Tuned re-runs not finished yet" in claims
    assert (
        "| `boundary` | stays `'reset'` unless a mask arm beats `ev_reset` in the aggregate primary endpoint | undecided"
        in claims
    )
    assert "`python benchmarks/studies/evidence/decisions.py --primary " in claims
    # Rewriting one report keeps the others' README tables and claims (read from their stored summaries)
    write_reports("secondary")
    assert (out_dir / "results" / "evidence_readme_tables.md").read_text() == tables
    assert "- `ev_mask` is beaten by `ev_reset`" in (out_dir / "DECISIONS.md").read_text()
    # Q4: the tuned re-runs on their fresh seeds, against the tuned ev_reset
    # The protocol's settings, as the committed reports are made
    commands = evidence_report.report_commands(
        out_dir, out_dir / "results", grid, tmp_path / "tuned", 10, 2000, evidence_report.REPORTS
    )
    for name, argv in commands.items():
        assert argv[argv.index("--final-evaluations") + 1] == "2" and argv[argv.index("--min-seeds") + 1] == "10"
        assert argv[argv.index("--reps") + 1] == "2000" and "--diagnostics" in argv
        assert argv[argv.index("--evaluations") + 1] == "20"
        assert argv[argv.index("--first-seed") + 1] == ("100" if name == "tuned" else "0")
    primary, secondary = commands["primary"], commands["secondary"]
    assert primary[primary.index("--variants") + 1 : primary.index("--baseline")] == [
        "ev_reset",
        "ev_reset_importance",
        "ev_mask",
        "ev_mask_kept",
        "ev_rppo",
    ]
    assert secondary[secondary.index("--variants") + 1 : secondary.index("--baseline")] == [
        "ev_reset",
        "ev_reset_stride1",
        "ev_reset_gru",
        "ev_reset_refresh",
    ]
    assert secondary[secondary.index("--envs") + 1 : secondary.index("--out")] == [
        "CueRecall-v0",
        "EarlyChoice-v0",
        "CartPoleNoVel-v1",
        "PopgymRepeatPreviousEasy-v0",
    ]
    assert primary[primary.index("--baseline") + 1] == secondary[secondary.index("--baseline") + 1] == "ev_reset"
    tuned = commands["tuned"]
    assert tuned[tuned.index("--first-seed") + 1] == "100" and tuned[tuned.index("--baseline") + 1] == "tuned_ev_reset"
    assert tuned[tuned.index("--grid") + 1] == str(tmp_path / "tuned")
    notes = tuned[tuned.index("--notes") + 1 : tuned.index("--final-evaluations")]
    assert notes == [str(evidence_report.NOTES)]
    # Once `tune.py rerun` has summarised the searches, the tuned report shows them first
    (tmp_path / "SEARCH.md").write_text("## The searches (Q4)\n")
    tuned = evidence_report.report_commands(out_dir, out_dir / "results", grid, tmp_path / "tuned", 10, 2000, ["tuned"])[
        "tuned"
    ]
    notes = tuned[tuned.index("--notes") + 1 : tuned.index("--final-evaluations")]
    assert notes == [str(tmp_path / "SEARCH.md"), str(evidence_report.NOTES)]


PRIMARY_ENVS = [
    "CueRecall-v0",
    "CueRecallLong-v0",
    "EarlyChoice-v0",
    "CartPoleNoVel-v1",
    "PendulumNoVel-v1",
    "PopgymRepeatPreviousEasy-v0",
    "PopgymNoisyPositionOnlyCartPoleEasy-v0",
    "PopgymCountRecallEasy-v0",
    "MiniGridMemoryS7Flat-v0",
]


SECONDARY_ENVS = ["CueRecall-v0", "EarlyChoice-v0", "CartPoleNoVel-v1", "PopgymRepeatPreviousEasy-v0"]


def _row(env: str, variant: str, difference: float, p_holm: float) -> dict[str, Any]:
    """A per-env difference row of report.py --json (interval: the difference +- 1)."""
    return {
        "env": env,
        "variant": variant,
        "difference": [difference, difference - 1, difference + 1],
        "p": p_holm,
        "p_holm": p_holm,
    }


def _summary(
    baseline: str,
    probabilities: dict[str, list[float]],
    rows: list[dict[str, Any]],
    envs: list[str] | None = None,
    seeds: list[int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """
    A report.py --json summary with the given aggregate P(X > baseline) over ``envs`` (default: the primary
    report's 9) and ``seeds`` (default 0 to 9), per-env rows ``rows`` plus a not-significant row for every other
    (env, variant).
    """
    envs = PRIMARY_ENVS if envs is None else envs
    variants = [baseline, *probabilities]
    iqm = {v: [0.5, 0.4, 0.6] for v in variants}
    aggregate = {"envs": envs, "seeds": list(range(10)) if seeds is None else seeds, "iqm": iqm}
    given = {(row["env"], row["variant"]) for row in rows}
    rows = rows + [_row(env, v, 0.1, 0.9) for env in envs for v in probabilities if (env, v) not in given]
    return {
        "baseline": baseline,
        "variants": variants,
        "final_evaluations": 2,
        "reps": 2000,
        "bootstrap_seed": 0,
        "evaluations": 20,
        "failed": [],
        "aggregate": {key: {**aggregate, "probability_of_improvement": probabilities} for key in ("final", "auc")}
        if probabilities
        else {},
        "differences": {"final": rows, "auc": []},
        **extra,
    }


def _with_probabilities(summary: dict[str, Any], **probabilities: list[float]) -> dict[str, Any]:
    """``summary`` with some P(X > baseline) of the final aggregate replaced."""
    final = summary["aggregate"]["final"]
    new = {**final, "probability_of_improvement": {**final["probability_of_improvement"], **probabilities}}
    return {**summary, "aggregate": {**summary["aggregate"], "final": new}}


def test_the_protocols_aggregate_drops_envs_with_failed_runs_and_needs_its_arms_and_bootstrap() -> None:
    decisions = _load("decisions")
    arms = {"ev_reset_importance": [0.7, 0.55, 0.85], "ev_mask": [0.3, 0.2, 0.45], "ev_mask_kept": [0.5, 0.4, 0.6]}
    arms["ev_rppo"] = [0.2, 0.1, 0.3]
    full = _summary("ev_reset", arms, [])
    assert decisions.coverage(full, "primary")[0] is True
    # A failed run of an aggregate seed takes its env out of the protocol's aggregate (amendment 3) ...
    failed = [{"variant": "ev_mask", "env": "MiniGridMemoryS7Flat-v0", "seed": 4, "reason": "exit code 1"}]
    without = [env for env in PRIMARY_ENVS if env != "MiniGridMemoryS7Flat-v0"]
    # (the env's per-env tests remain, from its other seeds)
    minigrid_rows = [_row("MiniGridMemoryS7Flat-v0", arm, 0.1, 0.9) for arm in arms]
    eight = _summary("ev_reset", arms, minigrid_rows, envs=without, failed=failed)
    assert decisions.coverage(eight, "primary") == (True, "seeds 0 to 9 of 8 envs: the protocol's aggregate")
    assert decisions.decisions(eight, None)[1].fired is True
    # ... so the aggregate over all 9 envs is then not the protocol's, nor is one without the env and no failure
    assert decisions.coverage(_summary("ev_reset", arms, [], failed=failed), "primary")[0] is False
    covered, text = decisions.coverage(_summary("ev_reset", arms, [], envs=without), "primary")
    assert covered is False and "of 9 envs" in text
    # A failure of a later seed (20-seed envs) or of an arm the report does not hold leaves the env in
    later = [{**failed[0], "seed": 15}, {**failed[0], "variant": "ev_reset_gru", "seed": 0}]
    assert decisions.coverage(_summary("ev_reset", arms, [], failed=later), "primary")[0] is True
    # Every arm of the report, and the protocol's bootstrap
    fewer = _summary("ev_reset", {k: v for k, v in arms.items() if k != "ev_rppo"}, [])
    covered, text = decisions.coverage(fewer, "primary")
    assert covered is False and "the protocol's are ev_reset, ev_reset_importance, ev_mask, ev_mask_kept, ev_rppo" in text
    covered, text = decisions.coverage({**full, "reps": 200}, "primary")
    assert covered is False and "200 bootstrap resamples" in text
    # ... and a report that checked every run's 20 evaluations (runs with others are failed runs)
    covered, text = decisions.coverage({**full, "evaluations": None}, "primary")
    assert covered is False and "made with --evaluations None" in text
    assert all(d.fired is None for d in decisions.decisions({**full, "reps": 200}, None)[:2])
    # A summary from before failures were listed as runs is refused, naming the key
    with pytest.raises(ValueError, match="failed"):
        decisions.validate({**full, "failed": ["ev_mask MiniGridMemoryS7Flat-v0 seed 4"]}, "primary")
    with pytest.raises(ValueError, match="'reps'"):
        decisions.validate({k: v for k, v in full.items() if k != "reps"}, "primary")


def test_decisions_apply_the_protocols_rules_to_the_estimates() -> None:
    decisions = _load("decisions")
    not_significant = [0.5, 0.4, 0.6]
    primary = _summary(
        "ev_reset",
        {
            "ev_reset_importance": [0.7, 0.55, 0.85],
            "ev_mask": [0.3, 0.2, 0.45],
            "ev_mask_kept": not_significant,
            "ev_rppo": [0.2, 0.1, 0.3],
        },
        # Importance significantly better on one env: no veto (only "worse" vetoes)
        [_row("CueRecall-v0", "ev_reset_importance", 0.3, 0.01), _row("PendulumNoVel-v1", "ev_rppo", -3.0, 0.04)],
    )
    assert decisions.coverage(primary, "primary") == (True, "seeds 0 to 9 of 9 envs: the protocol's aggregate")
    boundary, weighting, stride, gru, refresh = decisions.decisions(primary, None)
    # Neither mask arm beats ev_reset (one n.s.): reset stays, and the README must say it is not significant
    assert boundary.fired is False and boundary.outcome.startswith("stays `'reset'`; the README says")
    assert "P(`ev_mask_kept` > `ev_reset`) = 0.50 (0.40 to 0.60)" in boundary.evidence
    # A point estimate above 0.5 is not enough: the interval must exclude 0.5
    assert decisions.decide_boundary(_with_probabilities(primary, ev_mask=[0.6, 0.45, 0.7])).fired is False
    # Reset beating both mask arms needs no "not significant" remark
    beaten = _with_probabilities(primary, ev_mask_kept=[0.2, 0.1, 0.4])
    assert decisions.decide_boundary(beaten).outcome == "stays `'reset'`"
    # Importance beats ev_reset in the aggregate and is worse on no env: the rule fires
    assert weighting.fired is True and weighting.outcome == "becomes `'importance'`" and not boundary.notes
    # ... not with an interval that includes 0.5, even with a point estimate above it ...
    for triple in ([0.6, 0.45, 0.75], not_significant):
        assert decisions.decide_weighting(_with_probabilities(primary, ev_reset_importance=triple)).fired is False
    # ... nor if it is significantly worse on one env (Holm), however good the aggregate
    vetoed_rows = [_row("PendulumNoVel-v1", "ev_reset_importance", -1.0, 0.03)]
    every_arm = primary["aggregate"]["final"]["probability_of_improvement"]
    vetoed = decisions.decide_weighting(_summary("ev_reset", every_arm, vetoed_rows))
    assert vetoed.fired is False and vetoed.outcome == "stays `'uniform'`"
    assert "PendulumNoVel-v1 -1 (-2 to +0, Holm p 0.030)" in vetoed.evidence
    # An env without its test (fewer than 2 seeds there) cannot pass the veto: undecided, not "worse on no env"
    untested = {
        **primary,
        "differences": {"final": [r for r in primary["differences"]["final"] if r["env"] != "CueRecall-v0"]},
    }
    assert (
        decisions.decide_weighting(untested).outcome == "undecided: no per-env test of `ev_reset_importance` on CueRecall-v0"
    )
    # A NaN p-value or difference is never significant
    assert decisions.env_verdict(_row("X", "a", -1.0, float("nan"))) == "n.s."
    assert decisions.env_verdict(_row("X", "a", float("nan"), 0.01)) == "n.s."
    # A mask arm that beats ev_reset changes the boundary, with that arm's weighting; the better of two wins
    masked = _with_probabilities(primary, ev_mask=[0.62, 0.52, 0.7], ev_mask_kept=[0.66, 0.51, 0.8])
    changed, weighting_too = decisions.decisions(masked, None)[:2]
    assert (
        changed.fired is True and changed.outcome == "becomes `boundary='mask'` with `weighting='kept_mean'` (`ev_mask_kept`)"
    )
    # Both rules fire: the protocol has no rule for the combination, and the document says so
    assert weighting_too.fired is True and "mask with importance weighting was not run" in changed.notes[0]
    assert "- `boundary`: the new boundary comes with its arm's weighting" in decisions.document(masked, None, None)
    # An interim aggregate (2 seeds, or fewer envs) decides nothing but shows its numbers
    interim = _summary("ev_reset", primary["aggregate"]["final"]["probability_of_improvement"], [], seeds=[0, 1])
    assert decisions.coverage(interim, "primary")[1].startswith("seeds 0 to 1 of 9 envs: an interim look")
    for decision in decisions.decisions(interim, None)[:2]:
        assert decision.fired is None and "an interim look" in decision.outcome and "P(`" in decision.evidence
    one_env = _summary("ev_reset", {"ev_mask": [0.3, 0.2, 0.4], "ev_mask_kept": [0.3, 0.2, 0.4]}, [], envs=["CueRecall-v0"])
    assert decisions.decide_boundary(one_env).fired is None
    # Without the secondary report (or its aggregate) its decisions are undecided, never a silent "stays"
    assert stride.fired is None and gru.fired is None and refresh.fired is None
    assert stride.outcome == "undecided: no aggregate of `ev_reset_stride1` yet"
    assert decisions.decide_boundary(_summary("ev_reset", {}, [])).fired is None
    wall_time = {
        "CueRecall-v0": {"ev_reset_stride1": {"seconds": 30.0, "paired_median_ratio": 2.9, "pairs": 4}},
        # No run side by side with one of ev_reset: no ratio (a ratio of means would mix sessions and machines)
        "EarlyChoice-v0": {"ev_reset_stride1": {"seconds": 9.0, "paired_median_ratio": None, "pairs": 0}},
    }  # fmt: skip
    probabilities = {
        "ev_reset_stride1": [0.6, 0.45, 0.75],
        "ev_reset_gru": [0.7, 0.6, 0.8],
        "ev_reset_refresh": [0.4, 0.2, 0.55],
    }
    secondary = _summary("ev_reset", probabilities, [], envs=SECONDARY_ENVS, wall_time=wall_time)
    _, _, stride, gru, refresh = decisions.decisions(primary, secondary)
    # Stride 1's cost is reported next to its decision either way: same-session pairs only
    assert stride.fired is False and stride.outcome == "stays `window_size`"
    assert stride.evidence.endswith(
        "CueRecall-v0 2.90 (4 same-session pairs), EarlyChoice-v0 not comparable (no run side by side with one of `ev_reset`)"
    )
    without_times = {k: v for k, v in secondary.items() if k != "wall_time"}
    assert (
        "wall times not in the summary" in decisions.decide_opt_in(without_times, "ev_reset_stride1", "s", "a", "b").evidence
    )
    assert gru.fired is True and "MlpGruPolicy" in gru.outcome and refresh.fired is False
    # The protocol's wording: a claim only where the interval excludes 0.5
    assert decisions.wording([0.7, 0.55, 0.85], "ev_reset_gru", "ev_reset") == "`ev_reset_gru` beats `ev_reset`"
    assert decisions.wording([0.3, 0.2, 0.45], "ev_mask", "ev_reset") == "`ev_mask` is beaten by `ev_reset`"
    assert decisions.wording([0.6, 0.45, 0.7], "ev_mask", "ev_reset") == "`ev_mask` against `ev_reset`: not significant"
    text = decisions.comparison(primary, "ev_rppo")
    assert text.startswith("- `ev_rppo` is beaten by `ev_reset` (P(`ev_rppo` > `ev_reset`) = 0.20 (0.10 to 0.30)")
    assert "worse on PendulumNoVel-v1 -3 (-4 to -2, Holm p 0.040)" in text and "better on none" in text
    # The secondary endpoint gets the same wording, and so does each group of envs
    assert text.endswith("Over training (secondary endpoint): `ev_rppo` is beaten by `ev_reset` (P = 0.20 (0.10 to 0.30)).")
    groups = {"NoVel": {"envs": ["A", "B"], "final": {"probability_of_improvement": {"ev_mask": [0.6, 0.52, 0.7]}}}}
    table = decisions.group_table({**primary, "groups": groups}, ["ev_mask", "ev_rppo"])
    assert table[2:] == [
        "| NoVel (2 envs) | `ev_mask` | 0.60 (0.52 to 0.70) | better | - |  |",
        "| NoVel (2 envs) | `ev_rppo` | - |  | - |  |",
    ]
    assert decisions.group_table(primary, ["ev_mask"]) == []
    # Q4: the tuned verdict next to the untuned one on the same env, compared as verdicts
    tuned = _summary(
        "tuned_ev_reset",
        {"tuned_ev_rppo": [0.4, 0.3, 0.5], "tuned_ev_mask_kept": [0.5, 0.4, 0.6]},
        [_row("PendulumNoVel-v1", "tuned_ev_rppo", -1.0, 0.2), _row("EarlyChoice-v0", "tuned_ev_mask_kept", 1.0, 0.01)],
        envs=["EarlyChoice-v0", "CartPoleNoVel-v1"],
        seeds=list(range(100, 110)),
    )
    q4 = decisions.tuned_lines(tuned, primary)
    pendulum = next(line for line in q4 if line.startswith("- PendulumNoVel-v1, `tuned_ev_rppo`"))
    assert ": n.s., " in pendulum and pendulum.endswith(
        "the untuned difference is not confirmed after tuning (not significant)"
    )
    early = next(line for line in q4 if line.startswith("- EarlyChoice-v0, `tuned_ev_mask_kept`"))
    assert early.endswith("significant only after tuning")
    cartpole = next(line for line in q4 if line.startswith("- CartPoleNoVel-v1, `tuned_ev_rppo`"))
    assert cartpole.endswith("the same conclusion as untuned")
    assert decisions.q4_reading("worse", "better") == "reversed after tuning"
    assert "untuned `ev_rppo` - `ev_reset`: not run" in decisions.tuned_lines(tuned, None)[0]
    document = decisions.document(primary, secondary, tuned)
    assert "- tuned report: seeds 100 to 109 of 2 envs: the protocol's aggregate." in document
    assert "Holm over the tuned table: 2 envs x 2 comparisons" in document
    assert "Interim look" not in document and "Interim look" in decisions.document(interim, None, None)
    assert "## Decisions" in document and "| `weighting` |" in document and "| `GRU` |" in document
    assert "Tuned re-runs not finished yet" in decisions.document(primary, None, None)
    # Wrong input names the report and what is wrong
    with pytest.raises(ValueError, match="primary: the summary has no 'differences'"):
        decisions.document({k: v for k, v in primary.items() if k != "differences"}, None, None)
    with pytest.raises(ValueError, match="secondary: baseline 'ev_mask'; the protocol's secondary report uses 'ev_reset'"):
        decisions.document(primary, {**secondary, "baseline": "ev_mask"}, None)
    with pytest.raises(ValueError, match="final_evaluations 1"):
        decisions.document({**primary, "final_evaluations": 1}, None, None)
