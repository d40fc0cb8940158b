"""
The evidence study's claims and decisions, applied mechanically to the reports' estimates by the rules
``benchmarks/PROTOCOL.md`` fixed before the runs ("Statistics": the wording; "Decisions fixed now": the defaults;
Q4: the tuned comparison), so that what the README says follows from the runs and not from a reading of them.

Reads the JSON summaries ``evidence_report.py`` writes (``report.py --json``: primary, secondary and, once the
tuned re-runs exist, tuned) and writes markdown:

- per question, each arm against the baseline in the aggregate primary endpoint (IQM and ``P(X > baseline)``
  with 95% intervals) in the protocol's wording: "beats" or "is beaten by" only where the probability-of-
  improvement interval excludes 0.5, otherwise "not significant"; the per-env differences that stay
  significant after Holm's correction; the same wording for the secondary endpoint (over training) and per
  group of envs;
- Q4: per env and tuned arm, the tuned verdict next to the untuned one (whether Q1's conclusion holds);
- the decisions on ``boundary``, ``weighting``, ``window_stride``, GRU and ``memory_refresh``, each with the rule,
  the numbers it was applied to and whether it fired ("undecided" while a report or its aggregate is missing).

Usage: python benchmarks/decisions.py --primary P.json [--secondary S.json] [--tuned T.json] [--out F.md]
"""

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from readme_tables import estimate, verdict  # noqa: E402  (benchmarks/readme_tables.py)

ALPHA = 0.05
# The masking arms and the weighting each one trains with (PROTOCOL.md, "Arms and settings")
MASK_ARMS = {"ev_mask": "uniform", "ev_mask_kept": "kept_mean"}


@dataclass
class Decision:
    """One of the protocol's default decisions: ``fired`` is None while it cannot be applied yet."""

    setting: str
    rule: str
    outcome: str
    fired: bool | None
    evidence: str


def probability(summary: dict[str, Any], variant: str, key: str = "final") -> list[float] | None:
    """``[P(variant > baseline), low, high]`` of the aggregate, or None without an aggregate or that variant."""
    aggregate = summary.get("aggregate", {}).get(key)
    if not aggregate:
        return None
    return aggregate["probability_of_improvement"].get(variant)


def wording(triple: list[float], variant: str, baseline: str) -> str:
    """The protocol's wording for an aggregate comparison: only an interval that excludes 0.5 is a claim."""
    _, low, high = triple
    if low > 0.5:
        return f"`{variant}` beats `{baseline}`"
    if high < 0.5:
        return f"`{variant}` is beaten by `{baseline}`"
    return f"`{variant}` against `{baseline}`: not significant"


def env_verdict(row: dict[str, Any], alpha: float = ALPHA) -> str:
    """A per-env difference row's verdict: ``better``/``worse`` after Holm's correction, else ``n.s.``."""
    if row["p_holm"] >= alpha:
        return "n.s."
    return "better" if row["difference"][0] > 0 else "worse"


def env_rows(summary: dict[str, Any], variant: str, key: str = "final") -> list[dict[str, Any]]:
    """The per-env difference rows of one variant (every env it ran on)."""
    return [row for row in summary.get("differences", {}).get(key, []) if row["variant"] == variant]


def env_row_text(row: dict[str, Any]) -> str:
    """``env +d (low to high, Holm p)`` of one per-env difference row (raw returns)."""
    difference, low, high = row["difference"]
    return f"{row['env']} {difference:+.3g} ({low:+.3g} to {high:+.3g}, Holm p {row['p_holm']:.3f})"


def significant_envs(summary: dict[str, Any], variant: str, direction: str, key: str = "final") -> list[str]:
    """The envs where ``variant`` is significantly ``direction`` (``better``/``worse``) than the baseline."""
    return [env_row_text(row) for row in env_rows(summary, variant, key) if env_verdict(row) == direction]


def comparison(summary: dict[str, Any], variant: str) -> str:
    """One markdown bullet: an arm against the report's baseline, aggregate then per env."""
    baseline = summary["baseline"]
    triple = probability(summary, variant)
    if triple is None:
        return f"- `{variant}` against `{baseline}`: no aggregate yet."
    final = summary["aggregate"]["final"]
    better = significant_envs(summary, variant, "better")
    worse = significant_envs(summary, variant, "worse")
    text = (
        f"- {wording(triple, variant, baseline)}: P(`{variant}` > `{baseline}`) = {estimate(triple)}; IQM "
        f"{estimate(final['iqm'][variant])} against {estimate(final['iqm'][baseline])}. Per env, significant after "
        f"Holm: better on {'; '.join(better) if better else 'none'}; worse on {'; '.join(worse) if worse else 'none'}."
    )
    auc = probability(summary, variant, "auc")
    if auc is not None:
        # The secondary endpoint: the same wording rule, never a decision
        text += f" Over training (secondary endpoint): {wording(auc, variant, baseline)}, P = {estimate(auc)}."
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
            lines.append(f"| {name} ({len(group['envs'])} envs) | `{variant}` | " + " | ".join(cells) + " |")
    return lines if len(lines) > 2 else []


def decide_boundary(primary: dict[str, Any] | None) -> Decision:
    """``boundary`` stays ``"reset"`` unless a mask arm beats ``ev_reset`` in the aggregate primary endpoint."""
    rule = "stays `'reset'` unless a mask arm beats `ev_reset` in the aggregate primary endpoint"
    triples: dict[str, list[float]] = {}
    for arm in MASK_ARMS:
        triple = probability(primary, arm) if primary else None
        if triple is None:
            return Decision("boundary", rule, "undecided: no aggregate of the mask arms yet", None, "")
        triples[arm] = triple
    evidence = "; ".join(f"P(`{arm}` > `ev_reset`) = {estimate(triple)}" for arm, triple in triples.items())
    winners = {arm: triple for arm, triple in triples.items() if triple[1] > 0.5}
    if winners:
        arm = max(winners, key=lambda name: winners[name][0])
        outcome = f"becomes `boundary='mask'` with `weighting='{MASK_ARMS[arm]}'` (`{arm}`)"
        return Decision("boundary", rule, outcome, True, evidence)
    beaten = all(triple[2] < 0.5 for triple in triples.values())
    outcome = "stays `'reset'`" + ("" if beaten else "; the README says where the difference is not significant")
    return Decision("boundary", rule, outcome, False, evidence)


def decide_weighting(primary: dict[str, Any] | None) -> Decision:
    """
    ``weighting`` becomes ``"importance"`` only if ``ev_reset_importance`` beats ``ev_reset`` in the aggregate
    primary endpoint and is significantly worse on no env (Holm).
    """
    rule = "becomes `'importance'` only if `ev_reset_importance` beats `ev_reset` in the aggregate and is worse on no env"
    triple = probability(primary, "ev_reset_importance") if primary else None
    if primary is None or triple is None:
        return Decision("weighting", rule, "undecided: no aggregate of `ev_reset_importance` yet", None, "")
    worse = significant_envs(primary, "ev_reset_importance", "worse")
    evidence = f"P(`ev_reset_importance` > `ev_reset`) = {estimate(triple)}; significantly worse on: " + (
        "; ".join(worse) if worse else "no env"
    )
    fired = triple[1] > 0.5 and not worse
    return Decision("weighting", rule, "becomes `'importance'`" if fired else "stays `'uniform'`", fired, evidence)


def decide_opt_in(secondary: dict[str, Any] | None, variant: str, setting: str, default: str, new: str) -> Decision:
    """A secondary arm's setting becomes the default only if the arm beats ``ev_reset`` in the aggregate."""
    rule = f"stays {default} unless `{variant}` beats `ev_reset` in the aggregate primary endpoint over its envs"
    triple = probability(secondary, variant) if secondary else None
    if secondary is None or triple is None:
        return Decision(setting, rule, f"undecided: no aggregate of `{variant}` yet", None, "")
    evidence = f"P(`{variant}` > `ev_reset`) = {estimate(triple)}"
    if variant == "ev_reset_stride1":
        # The protocol reports stride 1's cost next to the decision either way
        times = secondary.get("wall_time", {})
        ratios = [
            f"{env} {entry[variant]['paired_median_ratio']:.2f} ({entry[variant]['pairs']} pairs)"
            for env, entry in times.items()
            if variant in entry and entry[variant]["paired_median_ratio"] is not None
        ]
        evidence += "; wall time over `ev_reset`'s (median of same-session pairs): " + (
            ", ".join(ratios) if ratios else "no same-session pair"
        )
    fired = triple[1] > 0.5
    return Decision(setting, rule, f"becomes {new}" if fired else f"stays {default}", fired, evidence)


def decisions(primary: dict[str, Any] | None, secondary: dict[str, Any] | None) -> list[Decision]:
    """Every default decision ``PROTOCOL.md`` fixed, in its order."""
    return [
        decide_boundary(primary),
        decide_weighting(primary),
        decide_opt_in(secondary, "ev_reset_stride1", "window_stride", "`window_size`", "`1`"),
        decide_opt_in(secondary, "ev_reset_gru", "GRU", "opt-in", "the recommended policy (`MlpGruPolicy`)"),
        decide_opt_in(secondary, "ev_reset_refresh", "memory_refresh", "opt-in (`0`)", "the default (`1`)"),
    ]


def tuned_lines(tuned: dict[str, Any], primary: dict[str, Any] | None) -> list[str]:
    """Q4: per env and tuned arm, the tuned verdict (Holm over the tuned table) next to the untuned one."""
    untuned = {(row["env"], row["variant"]): row for row in primary.get("differences", {}).get("final", [])} if primary else {}
    lines = []
    for row in tuned.get("differences", {}).get("final", []):
        arm = row["variant"].removeprefix("tuned_")
        before = untuned.get((row["env"], arm))
        same = "" if before is None else (" (same as untuned)" if env_verdict(before) == env_verdict(row) else " (differs)")
        lines.append(
            f"- {row['env']}, `{row['variant']}` - `{tuned['baseline']}`: {env_verdict(row)}, {env_row_text(row)}; "
            f"untuned `{arm}` - `ev_reset`: "
            + (f"{env_verdict(before)}, {env_row_text(before)}" if before else "not run")
            + same
        )
    return lines or ["- No tuned difference yet."]


def document(primary: dict[str, Any] | None, secondary: dict[str, Any] | None, tuned: dict[str, Any] | None) -> str:
    """The markdown of claims and decisions."""
    lines = [
        "# Evidence study: claims and decisions (benchmarks/PROTOCOL.md's rules, applied mechanically)",
        "",
        "- Command: `python " + shlex.join(["benchmarks/decisions.py", *sys.argv[1:]]) + "`",
        "- Endpoint: the primary endpoint (mean normalised return of the last 2 of 20 evaluations). An aggregate "
        "claim needs the 95% interval of P(X > baseline) to exclude 0.5; a per-env claim a Holm-adjusted Welch p "
        f"below {ALPHA}. Everything else is reported as not significant, not as absent.",
        "",
    ]
    sections: list[tuple[str, dict[str, Any] | None, list[str]]] = [
        ("Q1: reset-and-continue against masking and RecurrentPPO", primary, ["ev_mask", "ev_mask_kept", "ev_rppo"]),
        ("Q2: importance weighting", primary, ["ev_reset_importance"]),
        ("Q3: stride 1, GRU, refreshed memory", secondary, ["ev_reset_stride1", "ev_reset_gru", "ev_reset_refresh"]),
    ]
    for title, summary, variants in sections:
        lines += [f"## {title}", ""]
        lines += [comparison(summary, v) for v in variants] if summary else ["- Report not written yet."]
        lines.append("")
        groups = group_table(summary, variants) if summary else []
        if groups:
            lines += ["By group of envs (better/worse: the interval excludes 0.5; n.s.: it does not):", "", *groups, ""]
    lines += ["## Q4: an equal tuning budget (seeds 100 to 109)", ""]
    lines += (tuned_lines(tuned, primary) if tuned else ["- Tuned re-runs not finished yet."]) + [""]
    lines += ["## Decisions", "", "| setting | rule | outcome | evidence |", "|---|---|---|---|"]
    for decision in decisions(primary, secondary):
        lines.append(f"| `{decision.setting}` | {decision.rule} | {decision.outcome} | {decision.evidence or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--primary", type=Path, required=True, help="the primary report's JSON (report.py --json)")
    parser.add_argument("--secondary", type=Path, default=None, help="the secondary report's JSON")
    parser.add_argument("--tuned", type=Path, default=None, help="the tuned report's JSON (Q4)")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here (default: print it)")
    args = parser.parse_args()
    summaries = [json.loads(path.read_text()) if path else None for path in (args.primary, args.secondary, args.tuned)]
    text = document(*summaries)
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
