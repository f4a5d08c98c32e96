"""What `rapid-llm run` prints: text for people, `--json` for machines.

JSON document (schema 1), top-level keys:
  schema            1
  model             the preset's name ("deepseek-v3"; "deepseek-v3/16" when narrowed by 16)
  config            {model, layers, batch, prompt_len, decode_steps, dtype, seed, narrow, device, graph}
                      (graph: our decode steps after the first replayed one captured CUDA graph; their
                      per-op times are the first step's, the throughput the replays')
  device            the dispatch device ("cpu", "cpu+triton-interpreter", "cuda:sm90")
  prompt_lengths    [int]: the ragged prompts' lengths
  parameters        int: the built model's parameter count; build_seconds: float
  throughput        {ours, reference}: {prefill_s, decode_s, prefill_tokens_per_s, decode_tokens_per_s}
  uses              [{kind: "op" | "torch", name (op id or work), where, rows: [row], reference_row,
                      calls, ours_ms, ours_percent, reference_ms, reference_percent}] in forward order;
                      kind "torch" is work no op serves (timed in plain torch), including
                      "rapid_llm check + plan lookup" (each call's argument check and plan lookup)
  fallbacks         [{op, where, row, reason}]: op uses served by the torch reference in our run, with why
                      the op's other rows could not serve (one clause)
  check             {max_abs_diff, max_abs_diff_per_step [prefill, decode 1, ...], max_abs_reference_logit,
                      tolerance {value, unit_roundoff, longest_reduction, op_uses, rule}, ok,
                      same_greedy_tokens}
"""

from __future__ import annotations

from .weights import Fp8Weight, leaves

SCHEMA_VERSION = 1


def fallback_reason(selection, table) -> str:
    """One clause: why the op's best non-reference row did not serve (its first failed condition)."""
    verdicts = [v for v in selection.explanation.verdicts if not table.rows_by_name[v.row].is_reference]
    if not verdicts:
        return "the op has no row besides its reference"
    verdict = next((v for v in verdicts if v.row.startswith("native/")), verdicts[0])
    if verdict.failures:
        return f"{verdict.row}: {verdict.failures[0].render()}"
    return f"{verdict.row}: {verdict.note or verdict.status}"


def _merge(result) -> list[dict]:
    """Our uses and the all-reference run's, joined on (kind, name, where), in our run's order."""
    entries: dict[tuple, dict] = {}
    for side in ("ours", "reference"):
        recorder = result[side].recorder
        total = sum(recorder.phase_seconds(phase) for phase in ("prefill", "decode")) or 1.0
        for use in recorder.uses.values():
            key = (use.kind, use.name, use.where)
            entry = entries.setdefault(
                key,
                {
                    "kind": use.kind,
                    "name": use.name,
                    "where": use.where,
                    "rows": [],
                    "reference_row": None,
                    "calls": 0,
                    "ours_ms": 0.0,
                    "ours_percent": 0.0,
                    "reference_ms": 0.0,
                    "reference_percent": 0.0,
                },
            )
            seconds = sum(use.seconds.values())
            entry[f"{side}_ms"] += 1e3 * seconds
            entry[f"{side}_percent"] += 100 * seconds / total
            if side == "ours":
                entry["calls"] += sum(use.calls.values())
                if use.row and use.row not in entry["rows"]:
                    entry["rows"].append(use.row)
            elif use.row:
                entry["reference_row"] = use.row
    return list(entries.values())


def _throughput(result, side: str) -> dict:
    config, seconds = result["config"], result[side].seconds
    prefill_tokens = sum(config.prompt_lengths())
    decode_tokens = config.batch * config.decode_steps
    return {
        "prefill_s": seconds["prefill"],
        "decode_s": seconds["decode"],
        "prefill_tokens_per_s": prefill_tokens / seconds["prefill"] if seconds["prefill"] else None,
        "decode_tokens_per_s": decode_tokens / seconds["decode"] if seconds["decode"] else None,
    }


def fallbacks(result) -> list[dict]:
    table, found = result["table"], []
    for use in result["ours"].recorder.uses.values():
        if use.kind == "op" and table.rows_by_name[use.row].is_reference:
            found.append(
                {"op": use.name, "where": use.where, "row": use.row, "reason": fallback_reason(use.selection, table)}
            )
    return found


def parameters(weights) -> int:
    """Parameters of the built model (an fp8 weight counts its values, not its block scales)."""
    return sum(w.weight.numel() if isinstance(w, Fp8Weight) else w.numel() for w in leaves(weights))


def document(result) -> dict:
    config = result["config"]
    return {
        "schema": SCHEMA_VERSION,
        "model": result["preset"].name,
        "config": {
            name: getattr(config, name)
            for name in (
                "model",
                "layers",
                "batch",
                "prompt_len",
                "decode_steps",
                "dtype",
                "seed",
                "narrow",
                "device",
                "graph",
            )
        },
        "device": str(result["env"].device),
        "prompt_lengths": config.prompt_lengths(),
        "parameters": parameters(result["weights"]),
        "build_seconds": result["build_seconds"],
        "throughput": {"ours": _throughput(result, "ours"), "reference": _throughput(result, "reference")},
        "uses": _merge(result),
        "fallbacks": fallbacks(result),
        "check": result["check"],
    }


def _rate(value) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render_text(doc: dict) -> str:
    config, preset_layers = doc["config"], doc["config"]["layers"]
    widths = "real widths" if config["narrow"] == 1 else f"widths / {config['narrow']}"
    lines = [
        f"rapid-llm run  {doc['model']}  {preset_layers} layers, {widths}  device={doc['device']}  "
        f"dtype={config['dtype']}  seed={config['seed']}",
        f"{config['batch']} prompts of {doc['prompt_lengths']} tokens, then {config['decode_steps']} decode steps "
        f"(tokens: the all-reference run's greedy choices, fed to both runs)"
        + ("; our decode steps after the first replay one captured CUDA graph" if config.get("graph") else ""),
        f"random weights: {doc['parameters'] / 1e9:.2f} B parameters, built in {doc['build_seconds']:.1f} s",
        "",
        f"{'':<16}{'prefill tok/s':>15}{'decode tok/s':>15}{'prefill s':>12}{'decode s':>12}",
    ]
    for side, label in (("ours", "ours"), ("reference", "all-reference")):
        t = doc["throughput"][side]
        lines.append(
            f"{label:<16}{_rate(t['prefill_tokens_per_s']):>15}{_rate(t['decode_tokens_per_s']):>15}"
            f"{t['prefill_s']:>12.3f}{t['decode_s']:>12.3f}"
        )
    lines += ["", "time per op use (prefill + decode; wall clock per call):"]
    ops = [u for u in doc["uses"] if u["kind"] == "op"]
    work = [u for u in doc["uses"] if u["kind"] == "torch"]
    name_width = max(len(u["name"]) for u in doc["uses"]) + 2
    where_width = min(48, max(len(u["where"]) for u in doc["uses"])) + 2
    row_width = max([len("row (ours)")] + [len(", ".join(u["rows"])) for u in ops]) + 2
    header = (
        f"  {'op':<{name_width}}{'where':<{where_width}}{'row (ours)':<{row_width}}{'calls':>6}"
        f"{'ours ms':>10}{'%':>6}{'ref ms':>10}{'%':>6}"
    )

    def line(use):
        where = use["where"] if len(use["where"]) <= 48 else use["where"][:45] + "..."
        return (
            f"  {use['name']:<{name_width}}{where:<{where_width}}{', '.join(use['rows']) or '-':<{row_width}}"
            f"{use['calls']:>6}{use['ours_ms']:>10.2f}{use['ours_percent']:>6.1f}"
            f"{use['reference_ms']:>10.2f}{use['reference_percent']:>6.1f}"
        )

    lines += [header, *map(line, ops), "", "  not served by rapid_llm (plain torch):", *map(line, work)]
    lines.append("")
    if doc["fallbacks"]:
        lines.append("fell back to the torch reference:")
        for fallback in doc["fallbacks"]:
            lines.append(f"  {fallback['op']} ({fallback['where']}): {fallback['reason']}")
    else:
        lines.append("fell back to the torch reference: none")
    check, bound = doc["check"], doc["check"]["tolerance"]
    verdict = "ok" if check["ok"] else "FAILED"
    lines += [
        "",
        f"final logits, ours vs all-reference: max |diff| = {check['max_abs_diff']:.3g}, tolerance {bound['value']:.3g} "
        f"-> {verdict}",
        f"  tolerance = {bound['rule']}: u = {bound['unit_roundoff']:.3g}, K_max = {bound['longest_reduction']}, "
        f"op_uses = {bound['op_uses']}, max|reference logits| = {check['max_abs_reference_logit']:.3g}",
    ]
    return "\n".join(lines)
