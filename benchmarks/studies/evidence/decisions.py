"""
The evidence study's claims and decisions, applied mechanically to the reports' estimates by the rules
``benchmarks/studies/evidence/PROTOCOL.md`` fixed before the runs ("Statistics": the wording; "Decisions fixed now":
the defaults; Q4: the tuned comparison), so that what the README says follows from the runs and not from a reading of them.

Reads the JSON summaries ``evidence_report.py`` writes (``report.py --json``: primary, secondary and, once the
tuned re-runs exist, tuned) and writes markdown:

- what each summary's aggregate covers (envs and seeds) and whether it is the protocol's (seeds 0 to 9, or 100
  to 109 for the tuned re-runs, of every env of the report); anything else is an interim look from which no
  decision is drawn;
- per question, each arm against the baseline in the aggregate primary endpoint (IQM and ``P(X > baseline)``
  with 95% intervals) in the protocol's wording: "beats" or "is beaten by" only where the probability-of-
  improvement interval excludes 0.5, otherwise "not significant"; the per-env differences that stay
  significant after Holm's correction; the same wording for the secondary endpoint (over training) and per
  group of envs;
- Q4: per env and tuned arm, the tuned verdict next to the untuned one (whether Q1's conclusion holds);
- the decisions on ``boundary``, ``weighting``, ``window_stride``, GRU and ``memory_refresh``, each with the rule,
  the numbers it was applied to and its outcome ("undecided" while a report, an arm or the protocol's aggregate
  is missing).

Usage: python benchmarks/studies/evidence/decisions.py --primary P.json [--secondary S.json] [--tuned T.json] [--out F.md]
"""

import argparse
import json
import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.kit import run_grid
from benchmarks.studies.evidence import evidence_report
from benchmarks.studies.evidence.readme_tables import env_row_text, estimate, verdict
from sb3_reset_ppo.experiments import runner

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parents[1]

ALPHA = 0.05
# PROTOCOL.md: the primary endpoint is the mean of the last 2 of 20 evaluations; aggregates pool 10 seeds per env
FINAL_EVALUATIONS = 2
AGGREGATE_SEEDS = 10
# The masking arms and the weighting each one trains with (PROTOCOL.md, "Arms and settings")
MASK_ARMS = {"ev_mask": "uniform", "ev_mask_kept": "kept_mean"}
TUNED_ENVS = ["EarlyChoice-v0", "CartPoleNoVel-v1"]
# PROTOCOL.md: rliable's stratified bootstrap with 2,000 resamples, bootstrap seed 0
REPS = 2000
BOOTSTRAP_SEED = 0
REQUIRED_KEYS = ("baseline", "variants", "final_evaluations", "reps", "failed", "aggregate", "differences")


@dataclass(frozen=True)
class Expected:
    """What the protocol fixes for one report: its baseline, arms, envs and the first of its aggregate seeds."""

    baseline: str
    arms: list[str]
    envs: list[str]
    first_seed: int


EXPECTED = {
    "primary": Expected("ev_reset", evidence_report.PRIMARY, run_grid.EVIDENCE_ENVS, 0),
    "secondary": Expected("ev_reset", evidence_report.SECONDARY, run_grid.EVIDENCE_SECONDARY_ENVS, 0),
    "tuned": Expected("tuned_ev_reset", evidence_report.TUNED, TUNED_ENVS, 100),
}


@dataclass
class Decision:
    """One of the protocol's default decisions: ``fired`` is None while it cannot be applied."""

    setting: str
    rule: str
    outcome: str
    fired: bool | None
    evidence: str
    notes: list[str] = field(default_factory=list)


def validate(summary: dict[str, Any], name: str) -> None:
    """
    Check that ``summary`` is a ``report.py --json`` summary made as the protocol fixes the report ``name``.

    :param summary: the parsed JSON
    :param name: ``primary``, ``secondary`` or ``tuned``
    :raises ValueError: a key is missing, or the baseline or the endpoint is not the protocol's
    """
    for key in REQUIRED_KEYS:
        if key not in summary:
            raise ValueError(f"{name}: the summary has no {key!r}; expected report.py --json output with {REQUIRED_KEYS}")
    expected = EXPECTED[name].baseline
    if summary["baseline"] != expected:
        raise ValueError(f"{name}: baseline {summary['baseline']!r}; the protocol's {name} report uses {expected!r}")
    if summary["final_evaluations"] != FINAL_EVALUATIONS:
        raise ValueError(
            f"{name}: final_evaluations {summary['final_evaluations']!r}; the protocol's primary endpoint is the "
            f"mean of the last {FINAL_EVALUATIONS} evaluations"
        )
    failed = summary["failed"]
    if not isinstance(failed, list) or not all(isinstance(f, dict) and {"env", "seed", "variant"} <= set(f) for f in failed):
        raise ValueError(
            f"{name}: failed {failed!r}; expected a list of runs with 'variant', 'env' and 'seed' (report.py --json)"
        )


def coverage(summary: dict[str, Any], name: str) -> tuple[bool, str]:
    """
    Whether a summary's aggregate is the protocol's, and what it covers.

    :param summary: a validated summary
    :param name: ``primary``, ``secondary`` or ``tuned``
    :return: (the protocol's aggregate, a description of envs and seeds)
    """
    expected = EXPECTED[name]
    seeds = list(range(expected.first_seed, expected.first_seed + AGGREGATE_SEEDS))
    # PROTOCOL.md, amendment 3: a failed run is not replaced by a later seed; its env leaves the aggregate
    left_out = sorted({f["env"] for f in summary["failed"] if f["seed"] in seeds and f["variant"] in expected.arms})
    envs = [env for env in expected.envs if env not in left_out]
    wanted = f"the protocol's is seeds {seeds[0]} to {seeds[-1]} of {plural(len(envs), 'env')}" + (
        f", without {', '.join(left_out)} (failed runs)" if left_out else ""
    )
    final = summary["aggregate"].get("final")
    if not final:
        return False, f"no aggregate yet ({wanted})"
    covered = f"seeds {final['seeds'][0]} to {final['seeds'][-1]} of {plural(len(final['envs']), 'env')}"
    problems = []
    if final["seeds"] != seeds or sorted(final["envs"]) != sorted(envs):
        problems.append(wanted)
    if sorted(summary["variants"]) != sorted(expected.arms):
        problems.append(f"arms {', '.join(summary['variants'])}, the protocol's are {', '.join(expected.arms)}")
    if summary.get("evaluations") != runner.EVALUATIONS_PER_RUN:
        problems.append(
            f"made with --evaluations {summary.get('evaluations')}, the protocol's runs have "
            f"{runner.EVALUATIONS_PER_RUN} (others are failed runs)"
        )
    if summary["reps"] != REPS or summary.get("bootstrap_seed", BOOTSTRAP_SEED) != BOOTSTRAP_SEED:
        problems.append(
            f"{summary['reps']} bootstrap resamples with seed {summary.get('bootstrap_seed')}, the protocol's are "
            f"{REPS:,} with seed {BOOTSTRAP_SEED}"
        )
    if not problems:
        return True, f"{covered}: the protocol's aggregate"
    return False, f"{covered}: an interim look, not the protocol's aggregate ({'; '.join(problems)})"


def plural(count: int, noun: str) -> str:
    """``1 env``, ``2 envs``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def probability(summary: dict[str, Any], variant: str, key: str = "final") -> list[float] | None:
    """``[P(variant > baseline), low, high]`` of the aggregate, or None without an aggregate or that variant."""
    aggregate = summary["aggregate"].get(key)
    if not aggregate:
        return None
    return aggregate["probability_of_improvement"].get(variant)


def wording(triple: list[float], variant: str, baseline: str) -> str:
    """The protocol's wording for an aggregate comparison: only an interval that excludes 0.5 is a claim."""
    return {
        "better": f"`{variant}` beats `{baseline}`",
        "worse": f"`{variant}` is beaten by `{baseline}`",
        "n.s.": f"`{variant}` against `{baseline}`: not significant",
    }[verdict(triple)]


def env_verdict(row: dict[str, Any], alpha: float = ALPHA) -> str:
    """A per-env difference row's verdict: ``better``/``worse`` after Holm's correction, else ``n.s.`` (also NaN)."""
    difference = row["difference"][0]
    if not row["p_holm"] < alpha or math.isnan(difference) or difference == 0:
        return "n.s."
    return "better" if difference > 0 else "worse"


def env_rows(summary: dict[str, Any], variant: str, key: str = "final") -> list[dict[str, Any]]:
    """The per-env difference rows of one variant (every env it ran on with at least 2 seeds)."""
    return [row for row in summary["differences"].get(key, []) if row["variant"] == variant]


def significant_envs(summary: dict[str, Any], variant: str, direction: str, key: str = "final") -> list[str]:
    """The envs where ``variant`` is significantly ``direction`` (``better``/``worse``) than the baseline."""
    return [env_row_text(row) for row in env_rows(summary, variant, key) if env_verdict(row) == direction]


def comparison(summary: dict[str, Any], variant: str) -> str:
    """One markdown bullet: an arm against the report's baseline, aggregate then per env, both endpoints."""
    baseline = summary["baseline"]
    triple = probability(summary, variant)
    if triple is None:
        return f"- `{variant}` against `{baseline}`: no aggregate yet."
    final = summary["aggregate"]["final"]
    better = significant_envs(summary, variant, "better")
    worse = significant_envs(summary, variant, "worse")
    text = (
        f"- {wording(triple, variant, baseline)} (P(`{variant}` > `{baseline}`) = {estimate(triple)}; IQM "
        f"{estimate(final['iqm'][variant])} against {estimate(final['iqm'][baseline])}). Per env, significant after "
        f"Holm: better on {'; '.join(better) if better else 'none'}; worse on {'; '.join(worse) if worse else 'none'}."
    )
    auc = probability(summary, variant, "auc")
    if auc is not None:
        # The secondary endpoint: the same wording rule, never a decision
        text += f" Over training (secondary endpoint): {wording(auc, variant, baseline)} (P = {estimate(auc)})."
    return text


def group_table(summary: dict[str, Any], variants: list[str]) -> list[str]:
    """Per group of envs (the protocol's groups), each arm's P(X > baseline) and its verdict, both endpoints."""
    baseline = summary["baseline"]
    lines = [
        f"| group | arm | final P(> `{baseline}`) | | over training P(> `{baseline}`) | |",
        "|---|---|---|---|---|---|",
    ]
    for name, group in summary.get("groups", {}).items():
        for variant in variants:
            cells = []
            for key in ("final", "auc"):
                triple = group.get(key, {}).get("probability_of_improvement", {}).get(variant)
                cells += [estimate(triple), verdict(triple)] if triple else ["-", ""]
            lines.append(f"| {name} ({plural(len(group['envs']), 'env')}) | `{variant}` | " + " | ".join(cells) + " |")
    return lines if len(lines) > 2 else []


def undecided(setting: str, rule: str, why: str, evidence: str = "") -> Decision:
    """A decision the protocol's rule cannot be applied to yet."""
    return Decision(setting, rule, f"undecided: {why}", None, evidence)


def decide_boundary(primary: dict[str, Any] | None) -> Decision:
    """
    ``boundary`` stays ``"reset"`` unless a mask arm beats ``ev_reset`` in the aggregate primary endpoint. If both
    mask arms beat it, the one with the larger P(X > ``ev_reset``) (then the larger lower bound, then ``ev_mask``)
    sets the new default with its weighting.

    :param primary: the primary report's validated summary, or None
    """
    rule = "stays `'reset'` unless a mask arm beats `ev_reset` in the aggregate primary endpoint"
    if primary is None:
        return undecided("boundary", rule, "no primary report")
    triples: dict[str, list[float]] = {}
    for arm in MASK_ARMS:
        triple = probability(primary, arm)
        if triple is None:
            return undecided("boundary", rule, f"no aggregate of `{arm}` yet")
        triples[arm] = triple
    evidence = "; ".join(f"P(`{arm}` > `ev_reset`) = {estimate(triple)}" for arm, triple in triples.items())
    complete, covered = coverage(primary, "primary")
    if not complete:
        return undecided("boundary", rule, covered, evidence)
    winners = {arm: triple for arm, triple in triples.items() if verdict(triple) == "better"}
    if winners:
        arm = max(winners, key=lambda name: (winners[name][0], winners[name][1]))
        outcome = f"becomes `boundary='mask'` with `weighting='{MASK_ARMS[arm]}'` (`{arm}`)"
        return Decision("boundary", rule, outcome, True, evidence)
    beaten = all(verdict(triple) == "worse" for triple in triples.values())
    outcome = "stays `'reset'`" + ("" if beaten else "; the README says where the difference is not significant")
    return Decision("boundary", rule, outcome, False, evidence)


def decide_weighting(primary: dict[str, Any] | None) -> Decision:
    """
    ``weighting`` becomes ``"importance"`` only if ``ev_reset_importance`` beats ``ev_reset`` in the aggregate
    primary endpoint and is significantly worse (Holm) on no env; every env of the report needs its test.

    :param primary: the primary report's validated summary, or None
    """
    rule = (
        "becomes `'importance'` only if `ev_reset_importance` beats `ev_reset` in the aggregate primary endpoint "
        "and is significantly worse on no env (Holm)"
    )
    arm = "ev_reset_importance"
    triple = probability(primary, arm) if primary is not None else None
    if primary is None or triple is None:
        return undecided("weighting", rule, f"no aggregate of `{arm}` yet")
    tested = {row["env"] for row in env_rows(primary, arm)}
    untested = [env for env in EXPECTED["primary"].envs if env not in tested]
    worse = significant_envs(primary, arm, "worse")
    evidence = f"P(`{arm}` > `ev_reset`) = {estimate(triple)}; significantly worse on: " + (
        "; ".join(worse) if worse else "no env"
    )
    complete, covered = coverage(primary, "primary")
    if not complete:
        return undecided("weighting", rule, covered, evidence)
    if untested:
        return undecided("weighting", rule, f"no per-env test of `{arm}` on {', '.join(untested)}", evidence)
    fired = verdict(triple) == "better" and not worse
    return Decision("weighting", rule, "becomes `'importance'`" if fired else "stays `'uniform'`", fired, evidence)


def stride_cost(secondary: dict[str, Any], variant: str) -> str:
    """
    Stride 1's wall time over ``ev_reset``'s per env, which the protocol reports next to its decision: the median
    ratio of same-session pairs (runs side by side on one machine) where there are any, else nothing (means over
    runs of different sessions mix machines; reused runs were timed by another study).
    """
    if "wall_time" not in secondary:
        return "wall times not in the summary (made by a report.py before they were)"
    parts = []
    for env, entry in secondary["wall_time"].items():
        times = entry.get(variant)
        if times is None:
            continue
        if times["paired_median_ratio"] is not None:
            parts.append(f"{env} {times['paired_median_ratio']:.2f} ({plural(times['pairs'], 'same-session pair')})")
        else:
            parts.append(f"{env} not comparable (no run side by side with one of `ev_reset`)")
    return "wall time over `ev_reset`'s: " + (", ".join(parts) if parts else "no run timed")


def decide_opt_in(secondary: dict[str, Any] | None, variant: str, setting: str, default: str, new: str) -> Decision:
    """
    A secondary arm's setting becomes the default only if the arm beats ``ev_reset`` in the aggregate primary
    endpoint over the envs it runs on.

    :param secondary: the secondary report's validated summary, or None
    :param variant: the arm
    :param setting: the setting's name in the table
    :param default: the current default, as text
    :param new: what the default would become, as text
    """
    rule = f"stays {default} unless `{variant}` beats `ev_reset` in the aggregate primary endpoint over its envs"
    triple = probability(secondary, variant) if secondary is not None else None
    if secondary is None or triple is None:
        return undecided(setting, rule, f"no aggregate of `{variant}` yet")
    evidence = f"P(`{variant}` > `ev_reset`) = {estimate(triple)}"
    if variant == "ev_reset_stride1":
        # The protocol reports stride 1's cost next to the decision either way
        evidence += "; " + stride_cost(secondary, variant)
    complete, covered = coverage(secondary, "secondary")
    if not complete:
        return undecided(setting, rule, covered, evidence)
    fired = verdict(triple) == "better"
    return Decision(setting, rule, f"becomes {new}" if fired else f"stays {default}", fired, evidence)


def decisions(primary: dict[str, Any] | None, secondary: dict[str, Any] | None) -> list[Decision]:
    """Every default decision ``PROTOCOL.md`` fixed, in its order, with notes where two of them interact."""
    boundary, weighting = decide_boundary(primary), decide_weighting(primary)
    if boundary.fired:
        # PROTOCOL.md has no rule for the combination: say so next to both decisions
        boundary.notes.append(
            "the new boundary comes with its arm's weighting; the `weighting` rule compares weightings under "
            "`'reset'` only" + (", and mask with importance weighting was not run" if weighting.fired else "")
        )
    return [
        boundary,
        weighting,
        decide_opt_in(secondary, "ev_reset_stride1", "window_stride", "`window_size`", "`1`"),
        decide_opt_in(secondary, "ev_reset_gru", "GRU", "opt-in", "the recommended policy (`MlpGruPolicy`)"),
        decide_opt_in(secondary, "ev_reset_refresh", "memory_refresh", "opt-in (`0`)", "the default (`1`)"),
    ]


def q4_reading(untuned: str, tuned: str) -> str:
    """Whether Q1's per-env conclusion holds after tuning, from the two verdicts (never from the numbers)."""
    if untuned == tuned:
        return "the same conclusion as untuned"
    if tuned == "n.s.":
        return "the untuned difference is not confirmed after tuning (not significant)"
    if untuned == "n.s.":
        return "significant only after tuning"
    return "reversed after tuning"


def tuned_lines(tuned: dict[str, Any], primary: dict[str, Any] | None) -> list[str]:
    """
    Q4: per env and tuned arm, the tuned verdict (Holm over the tuned table: 2 envs x 2 comparisons) next to the
    untuned one (Holm over the primary table).
    """
    untuned_rows = {(row["env"], row["variant"]): row for row in primary["differences"].get("final", [])} if primary else {}
    untuned_baseline = primary["baseline"] if primary else EXPECTED["primary"].baseline
    lines = []
    for row in tuned["differences"].get("final", []):
        arm = row["variant"].removeprefix("tuned_")
        before = untuned_rows.get((row["env"], arm))
        text = f"- {row['env']}, `{row['variant']}` - `{tuned['baseline']}`: {env_verdict(row)}, {env_row_text(row)}; "
        if before is None:
            text += f"untuned `{arm}` - `{untuned_baseline}`: not run"
        else:
            text += f"untuned `{arm}` - `{untuned_baseline}`: {env_verdict(before)}, {env_row_text(before)}"
            text += f"; {q4_reading(env_verdict(before), env_verdict(row))}"
        lines.append(text)
    return lines or ["- No tuned difference yet."]


def document(
    primary: dict[str, Any] | None, secondary: dict[str, Any] | None, tuned: dict[str, Any] | None, command: str = ""
) -> str:
    """
    The markdown of claims and decisions.

    :param primary: the primary report's summary (validated here), or None
    :param secondary: the secondary report's summary, or None
    :param tuned: the tuned report's summary, or None
    :param command: the command line to state
    """
    summaries = {"primary": primary, "secondary": secondary, "tuned": tuned}
    for name, summary in summaries.items():
        if summary is not None:
            validate(summary, name)
    lines = [
        "# Evidence study: claims and decisions (benchmarks/studies/evidence/PROTOCOL.md's rules, applied mechanically)",
        "",
        *([f"- Command: `{command}`"] if command else []),
        f"- Endpoint: the primary endpoint (mean normalised return of the last {FINAL_EVALUATIONS} of 20 "
        "evaluations). An aggregate claim needs the 95% interval of P(X > baseline) to exclude 0.5; a per-env claim "
        f"a Holm-adjusted Welch p below {ALPHA}. Per-env rows not named here are not significant; the report lists "
        "every row with its interval.",
    ]
    for name, summary in summaries.items():
        lines.append(f"- {name} report: " + (coverage(summary, name)[1] if summary else "not written yet") + ".")
    lines.append("")
    sections: list[tuple[str, dict[str, Any] | None, list[str]]] = [
        ("Q1: reset-and-continue against masking and RecurrentPPO", primary, ["ev_mask", "ev_mask_kept", "ev_rppo"]),
        ("Q2: importance weighting", primary, ["ev_reset_importance"]),
        ("Q3: stride 1, GRU, refreshed memory", secondary, ["ev_reset_stride1", "ev_reset_gru", "ev_reset_refresh"]),
    ]
    for title, summary, variants in sections:
        lines += [f"## {title}", ""]
        if summary is not None and not coverage(summary, "secondary" if summary is secondary else "primary")[0]:
            lines += ["Interim look (see above): the wording is the protocol's, but no claim is drawn from these numbers.", ""]
        lines += [comparison(summary, v) for v in variants] if summary else ["- Report not written yet."]
        lines.append("")
        groups = group_table(summary, variants) if summary else []
        if groups:
            lines += ["By group of envs (better/worse: the interval excludes 0.5; n.s.: it does not):", "", *groups, ""]
    first = EXPECTED["tuned"].first_seed
    lines += [
        f"## Q4: an equal tuning budget (seeds {first} to {first + AGGREGATE_SEEDS - 1})",
        "",
        "Per env, the tuned verdict (Holm over the tuned table: 2 envs x 2 comparisons) next to the untuned one (Holm "
        "over the primary table); the two are compared as verdicts, never as numbers (PROTOCOL.md, amendment 6).",
        "",
    ]
    lines += (tuned_lines(tuned, primary) if tuned else ["- Tuned re-runs not finished yet."]) + [""]
    lines += ["## Decisions", "", "| setting | rule | outcome | evidence |", "|---|---|---|---|"]
    notes = []
    for decision in decisions(primary, secondary):
        lines.append(f"| `{decision.setting}` | {decision.rule} | {decision.outcome} | {decision.evidence or '-'} |")
        notes += [f"- `{decision.setting}`: {note}." for note in decision.notes]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--primary", type=Path, required=True, help="the primary report's JSON (report.py --json)")
    parser.add_argument("--secondary", type=Path, default=None, help="the secondary report's JSON")
    parser.add_argument("--tuned", type=Path, default=None, help="the tuned report's JSON (Q4)")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here (default: print it)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    primary, secondary, tuned = (
        json.loads(path.read_text()) if path else None for path in (args.primary, args.secondary, args.tuned)
    )
    try:
        text = document(primary, secondary, tuned, "python " + shlex.join(["benchmarks/studies/evidence/decisions.py", *argv]))
    except ValueError as error:
        parser.error(str(error))
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
