"""`rapid-llm run --plot FILE.png`: one stacked bar per run (ours, all-reference), one segment per op or work.

Segments are the op ids and the plain-torch work of the report's time table, summed over where they are
called, in milliseconds; the largest segments are labelled in the legend. Needs matplotlib (optional:
the CLI checks for it before the run).
"""

from __future__ import annotations


def plot(doc: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    totals: dict[str, list[float]] = {}
    for use in doc["uses"]:
        name = use["name"] if use["kind"] == "op" else f"{use['name']} (torch)"
        ours, reference = totals.setdefault(name, [0.0, 0.0])
        totals[name] = [ours + use["ours_ms"], reference + use["reference_ms"]]
    names = sorted(totals, key=lambda n: -max(totals[n]))
    figure, axes = plt.subplots(figsize=(7, 6))
    bottoms = [0.0, 0.0]
    colors = plt.get_cmap("tab20")
    for index, name in enumerate(names):
        values = totals[name]
        axes.bar(["ours", "all-reference"], values, bottom=bottoms, label=name, color=colors(index % 20))
        bottoms = [b + v for b, v in zip(bottoms, values)]
    axes.set_ylabel("ms (prefill + decode, wall clock per call)")
    config = doc["config"]
    axes.set_title(f"{doc['model']}, {config['layers']} layers, {config['dtype']}, {doc['device']}")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
