"""
The fair masking study's report (``PROTOCOL.md``, Endpoints and Statistics), from the runs stored so far.

Per task: each arm's IQM (95% stratified-bootstrap interval) of the final return, of the env steps, ``learn()`` CPU
seconds and training episodes to the threshold (over the runs that reached it, with their count), of the invalid
actions per episode and of the ``learn()`` CPU seconds per 1,000 training episodes; the probability of improvement
of ``maskable_reset_ppo`` over each other arm with its interval, and two-sided Mann-Whitney tests, Holm-adjusted over
the protocol's families (final return: 4 comparisons x the tasks; steps and CPU seconds to the threshold: twice
that). Works on partial runs (any number of seeds per arm, at least one); the statistics are
``sb3_reset_ppo.experiments.stats``'s.

Usage: python benchmarks/studies/masking_fair/masking_fair_report.py [--out DIR] [--reps 2000] [--write]
(``--write``: also ``summary.json`` and ``report.md`` in the runs' folder; the study's results page comes with the
study kit's ``study.yml`` once the runs are done)
"""

import argparse
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from sb3_reset_ppo.experiments import stats

HERE = Path(__file__).resolve().parent
BASE = "maskable_reset_ppo"
# The arm whose cost is compared with the base's at the same number of training episodes (PROTOCOL.md, Endpoints)
LIKE_FOR_LIKE = "recurrent_ppo_mask_obs"
# The tasks' analytical returns (PROTOCOL.md, Tasks), stated beside the arms' final returns
ANALYTICAL = {
    "MaskedCueRecallFair-v0": "memoryless optimum 0.5, 16 stacked frames at best 0.875, perfect memory 1.0",
    "LeducMatch-v0": "without memory of earlier hands at most 12.8 chips a match, knowing the style at most 17.2",
}
# A run that never reached the threshold: infinitely costly, as a finite number the rank statistics can order
NOT_REACHED = 1e18


def _study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("masking_fair_study", HERE / "masking_fair_study.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STUDY = _study()


def load(out: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The finished runs: ``{task: {arm: [record, ...]}}`` (by seed), with the failed runs' count under ``"failed"``."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for task in STUDY.TASKS:
        for arm in STUDY.ARMS:
            folder = out / task / arm
            records = [json.loads(path.read_text()) for path in sorted(folder.glob("seed_*.json"))] if folder.exists() else []
            if records:
                runs.setdefault(task, {})[arm] = sorted(records, key=lambda record: int(record["seed"]))
    return runs


def crossing(evaluations: list[dict[str, Any]], threshold: float) -> int | None:
    """
    The protocol's threshold crossing: the first evaluation whose mean return reaches ``threshold`` and so does the
    next one (the last evaluation alone if it is the first to reach it), or ``None``.
    """
    means = [float(np.mean(evaluation["returns"])) for evaluation in evaluations]
    for index, mean in enumerate(means):
        if mean >= threshold and (index + 1 == len(means) or means[index + 1] >= threshold):
            return index
    return None


def endpoints(record: dict[str, Any]) -> dict[str, Any]:
    """One run's endpoints (costs not reached: ``None``)."""
    task = record["task"]
    evaluations = record["evaluations"]
    final = evaluations[-STUDY.FINAL_EVALUATIONS :]
    returns = [r for evaluation in final for r in evaluation["returns"]]
    index = crossing(evaluations, STUDY.THRESHOLDS[task])
    reached = None if index is None else evaluations[index]
    last = evaluations[-1]
    result: dict[str, Any] = {
        "final": float(np.mean(returns)),
        "steps_to_threshold": None if reached is None else float(reached["timesteps"]),
        "cpu_to_threshold": None if reached is None else float(reached["learn_cpu_seconds"]),
        "episodes_to_threshold": None if reached is None else float(reached["training_episodes"]),
        "invalid": float(np.mean([n for evaluation in final for n in evaluation["invalid"]])),
        "cpu_per_1000_episodes": 1000 * float(last["learn_cpu_seconds"]) / max(1, int(last["training_episodes"])),
        "cpu_per_1000_steps": 1000 * float(last["learn_cpu_seconds"]) / max(1, int(last["timesteps"])),
    }
    if "delays" in final[0]:
        delays = np.array([d for evaluation in final for d in evaluation["delays"]], dtype=float)
        answered = np.array(returns) + 0.1 * np.array([n for evaluation in final for n in evaluation["invalid"]])
        long = delays > 128
        result["success_long"] = float(np.mean(answered[long] > 0.5)) if long.any() else None
        result["success_short"] = float(np.mean(answered[~long] > 0.5)) if (~long).any() else None
    else:
        styles = np.array([s for evaluation in final for s in evaluation["styles"]])
        result["by_style"] = {str(s): float(np.mean(np.array(returns)[styles == s])) for s in sorted(set(styles))}
    return result


def cpu_at_episodes(record: dict[str, Any], episodes: float) -> float | None:
    """
    A run's ``learn()`` CPU seconds when it had played ``episodes`` training episodes, interpolated between its
    evaluations (``None`` if it played fewer).
    """
    played = [float(evaluation["training_episodes"]) for evaluation in record["evaluations"]]
    cpu = [float(evaluation["learn_cpu_seconds"]) for evaluation in record["evaluations"]]
    return None if episodes > played[-1] else float(np.interp(episodes, played, cpu))


def like_for_like(base: list[dict[str, Any]], other: list[dict[str, Any]], reps: int) -> dict[str, Any]:
    """
    ``learn()`` CPU seconds of the base arm's and the other arm's runs at the same number of training episodes: the
    smaller of the two arms' IQM final episode counts.
    """
    finals = [_iqm([float(r["evaluations"][-1]["training_episodes"]) for r in runs], reps) for runs in (base, other)]
    episodes = min(triple[0] for triple in finals if triple is not None)
    cpu = [[c for c in (cpu_at_episodes(r, episodes) for r in runs) if c is not None] for runs in (base, other)]
    iqms = [_iqm(values, reps) for values in cpu]
    ratio = None if iqms[0] is None or iqms[1] is None else iqms[0][0] / iqms[1][0]
    return {"episodes": episodes, "final_episodes": finals, "cpu": iqms, "ratio": ratio}


def _iqm(values: list[float], reps: int) -> list[float] | None:
    """``[IQM, low, high]`` of one arm's values (``None`` for none)."""
    if not values:
        return None
    point, interval, _, _ = stats.aggregate({"arm": np.asarray(values, dtype=float)[:, None]}, reps=reps)
    return stats.interval_triple(point["arm"][0], interval["arm"][0, 0], interval["arm"][1, 0])


def _improvement(base: list[float], other: list[float], reps: int) -> list[float]:
    """``[P, low, high]``: probability that a run of the base arm scores above one of the other (higher is better)."""
    scores = {BASE: np.asarray(base, dtype=float)[:, None], "other": np.asarray(other, dtype=float)[:, None]}
    _, _, poi, poi_ci = stats.aggregate(scores, reps=reps, baseline="other")
    return stats.probability_triple(poi, poi_ci, f"{BASE},other")


def analyse(runs: dict[str, dict[str, list[dict[str, Any]]]], reps: int = stats.REPS) -> dict[str, Any]:
    """Every number of the report, per task and arm, and the comparisons of ``maskable_reset_ppo`` with the others."""
    summary: dict[str, Any] = {"tasks": {}, "reps": reps}
    primary: list[tuple[str, str, float]] = []  # (task, arm, p) of the primary family
    secondary: list[tuple[str, str, str, float]] = []
    for task, by_arm in runs.items():
        points = {arm: [endpoints(record) for record in records] for arm, records in by_arm.items()}
        arms: dict[str, Any] = {}
        for arm, rows in points.items():
            arms[arm] = {"runs": len(rows), "seeds": [int(r["seed"]) for r in by_arm[arm]]}
            for key in ("final", "invalid", "cpu_per_1000_episodes", "cpu_per_1000_steps"):
                arms[arm][key] = _iqm([row[key] for row in rows], reps)
            for key in ("steps_to_threshold", "cpu_to_threshold", "episodes_to_threshold"):
                reached = [row[key] for row in rows if row[key] is not None]
                arms[arm][key] = {"reached": len(reached), "iqm": _iqm(reached, reps)}
            for key in ("success_long", "success_short"):
                values = [row[key] for row in rows if row.get(key) is not None]
                if values:
                    arms[arm][key] = _iqm(values, reps)
            if "by_style" in rows[0]:
                styles = sorted({s for row in rows for s in row["by_style"]})
                arms[arm]["by_style"] = {
                    s: _iqm([row["by_style"][s] for row in rows if s in row["by_style"]], reps) for s in styles
                }
        comparisons: dict[str, Any] = {}
        if BASE in points:
            base = points[BASE]
            for arm, rows in points.items():
                if arm == BASE:
                    continue
                entry: dict[str, Any] = {}
                finals_base, finals_other = [r["final"] for r in base], [r["final"] for r in rows]
                p, method = stats.mann_whitney(finals_base, finals_other)
                entry["final"] = {"probability": _improvement(finals_base, finals_other, reps), "p": p, "method": method}
                primary.append((task, arm, p))
                for key in ("steps_to_threshold", "cpu_to_threshold"):
                    # lower is better: negated, a run that never reached it infinitely costly
                    cost_base = [-(r[key] if r[key] is not None else NOT_REACHED) for r in base]
                    cost_other = [-(r[key] if r[key] is not None else NOT_REACHED) for r in rows]
                    p, method = stats.mann_whitney(cost_base, cost_other)
                    entry[key] = {"probability": _improvement(cost_base, cost_other, reps), "p": p, "method": method}
                    secondary.append((task, arm, key, p))
                comparisons[arm] = entry
        summary["tasks"][task] = {"threshold": STUDY.THRESHOLDS[task], "arms": arms, "comparisons": comparisons}
        if BASE in by_arm and LIKE_FOR_LIKE in by_arm:
            summary["tasks"][task]["like_for_like"] = like_for_like(by_arm[BASE], by_arm[LIKE_FOR_LIKE], reps)
    for (task, arm, _), adjusted in zip(primary, stats.holm([p for *_, p in primary]) if primary else [], strict=True):
        summary["tasks"][task]["comparisons"][arm]["final"]["p_holm"] = adjusted
    for (task, arm, key, _), adjusted in zip(
        secondary, stats.holm([p for *_, p in secondary]) if secondary else [], strict=True
    ):
        summary["tasks"][task]["comparisons"][arm][key]["p_holm"] = adjusted
    summary["families"] = {"primary": len(primary), "secondary": len(secondary)}
    return summary


def _triple(values: list[float] | None, digits: int = 3) -> str:
    return "none" if values is None else f"{values[0]:.{digits}f} ({values[1]:.{digits}f} to {values[2]:.{digits}f})"


def _verdict(probability: list[float], p_holm: float) -> str:
    side = stats.significance(probability[1], probability[2], 0.5)
    return side if side != "not significant" and p_holm < 0.05 else "not significant"


def lines(summary: dict[str, Any]) -> list[str]:
    """The report's statements: every result with its interval, significant or not."""
    out = [
        f"Families: final return {summary['families']['primary']} tests, costs to the threshold "
        f"{summary['families']['secondary']} tests (Holm within each); IQM over seeds, 95% stratified-bootstrap intervals."
    ]
    for task, entry in summary["tasks"].items():
        out.append(f"## {task} (threshold {entry['threshold']}; {ANALYTICAL[task]})")
        for arm, values in entry["arms"].items():
            steps, cpu = values["steps_to_threshold"], values["cpu_to_threshold"]
            text = (
                f"- {arm} ({values['runs']} runs): final return {_triple(values['final'])}; reached the threshold "
                f"{steps['reached']} of {values['runs']}, env steps {_triple(steps['iqm'], 0)}, learn() CPU s "
                f"{_triple(cpu['iqm'], 1)}, training episodes {_triple(values['episodes_to_threshold']['iqm'], 0)}; "
                f"invalid actions per episode {_triple(values['invalid'], 2)}; learn() CPU s per 1,000 training "
                f"episodes {_triple(values['cpu_per_1000_episodes'], 1)}"
            )
            if "success_long" in values:
                text += (
                    f"; success on long delays {_triple(values['success_long'])}, short {_triple(values.get('success_short'))}"
                )
            if "by_style" in values:
                text += "; per style " + ", ".join(f"{s} {_triple(v, 2)}" for s, v in values["by_style"].items())
            out.append(text)
        if "like_for_like" in entry:
            same = entry["like_for_like"]
            ratio = "none" if same["ratio"] is None else f"{same['ratio']:.2f}"
            out.append(
                f"- learn() CPU s at {same['episodes']:.0f} training episodes (like for like): {BASE} "
                f"{_triple(same['cpu'][0], 1)}, {LIKE_FOR_LIKE} {_triple(same['cpu'][1], 1)}; ratio of the IQMs {ratio}"
            )
        for arm, comparison in entry["comparisons"].items():
            for key, name in (
                ("final", "final return"),
                ("steps_to_threshold", "env steps to the threshold"),
                ("cpu_to_threshold", "learn() CPU s to the threshold"),
            ):
                result = comparison[key]
                out.append(
                    f"- {BASE} vs {arm}, {name}: P(improvement) {_triple(result['probability'])}, Mann-Whitney "
                    f"p {result['p']:.3g} ({result['method']}), Holm p {result['p_holm']:.3g}: "
                    f"{_verdict(result['probability'], result['p_holm'])}"
                )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=STUDY.OUT, help="the runs' folder")
    parser.add_argument("--reps", type=int, default=stats.REPS, help="bootstrap resamples")
    parser.add_argument("--write", action="store_true", help="write summary.json and report.md beside the runs")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    runs = load(args.out)
    if not runs:
        parser.error(f"no finished run under {args.out}")
    summary = analyse(runs, args.reps)
    text = lines(summary)
    print("\n".join(text))
    if args.write:
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        (args.out / "report.md").write_text("# Fair masking study: results so far\n\n" + "\n".join(text) + "\n")


if __name__ == "__main__":
    main()
