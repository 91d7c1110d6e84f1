"""The instrument's noise: seed-vs-seed Delta of the baseline engine against itself (true Delta = 0),
per student, against tau; with the problem-only interval the paper's rule uses, for scale."""
import numpy as np

from opd import report, scripts, store


def main(inp, out, params):
    pairs = store.read_table(inp[0])
    noise = store.read_table(inp[1]).set_index("student")
    students = [s for s in [params.primary] + sorted(set(noise.index) - {params.primary}) if s in noise.index]
    fig, ax = report.figure(height=1.0 + 0.55 * max(1, len(students)))
    rng = np.random.default_rng(0)  # vertical jitter only
    labels = []
    for i, student in enumerate(students):
        d = 100 * pairs.loc[pairs["student"] == student, "delta"].to_numpy()
        n = noise.loc[student]
        ax.axhspan(i - 0.35, i + 0.35, xmin=0, xmax=1, color="#f0f0f0", lw=0, zorder=0)
        ax.fill_betweenx([i - 0.3, i + 0.3], -196 * n["se_problem"], 196 * n["se_problem"], color="#92c5de",
                         alpha=0.6, lw=0,
                         label="paper's 95% interval of one seed vs one (problems only)" if i == 0 else None)
        ax.scatter(d, i + rng.uniform(-0.22, 0.22, len(d)), s=4, color=report.NEUTRAL, lw=0,
                   label="one seed vs another (same engine)" if i == 0 else None)
        # the SDs go with the student's name (a label inside the axes sat on the points of a noisy student)
        labels.append(f"{student}\nSD {100 * n['sd_single']:.1f}% ({int(n['n_seeds'])} seeds)\n"
                      f"{int(n['n_seeds_row'])} vs {int(n['n_seeds'])} seeds: {100 * n['sd_used']:.1f}%")
    tau = 100 * float(noise["tau"].iloc[0]) if len(noise) else 20.0
    for x in (-tau, tau):
        ax.axvline(x, color=report.FAIL_COLOR, ls="--", lw=0.7, label="±τ" if x > 0 else None)
    ax.axvline(0, color="#bbbbbb", lw=0.5)
    reach = max([1.6 * tau] + [100 * abs(pairs["delta"]).max() * 1.1] if len(pairs) else [1.6 * tau])
    ax.set_xlim(-reach, reach)
    ax.set_yticks(range(len(students)), labels, fontsize=5)
    ax.set_ylim(-0.6, len(students) - 0.4)
    ax.set_xlabel("Δ of the standard engine against itself (%)")
    fig.legend(loc="outside lower center", frameon=False, ncol=2, fontsize=5)
    report.save_figure(fig, out.pdf, out.png, inp)


if "snakemake" in globals():
    scripts.run(main, snakemake)  # noqa: F821
