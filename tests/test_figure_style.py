"""The figure scripts' shared rules (opd.report): labels spread apart, axes that include their reference,
a colour for every row family."""
import numpy as np
import pandas as pd
from matplotlib.text import Text

from opd import report
from opd.rows import Row


def test_spread_keeps_order_and_gap_and_moves_no_label_that_has_room():
    y = np.array([0.50, 0.10, 0.51, 0.90, 0.52])
    p = report.spread(y, 0.05, 0.0, 1.0)
    order = np.argsort(y, kind="stable")
    assert (np.diff(p[order]) >= 0.05 - 1e-9).all()
    assert np.allclose(p[[1, 3]], [0.10, 0.90])  # alone: not moved
    assert np.isclose(p[[0, 2, 4]].mean(), y[[0, 2, 4]].mean())  # a crowd spreads about its centre


def test_spread_stays_inside_its_bounds():
    p = report.spread([0.99, 0.98, 0.97], 0.1, 0.05, 0.95)
    assert p.max() <= 0.95 + 1e-12 and np.allclose(np.sort(p), [0.75, 0.85, 0.95])


def test_label_lines_labels_every_line_without_overlap():
    fig, ax = report.figure()
    lines = [ax.plot([0, 10], [1.0, y])[0] for y in (2.0, 2.01, 2.02, 2.03, 5.0)]
    texts = report.label_lines(ax, lines, [f"line {i}" for i in range(5)])
    fig.draw_without_rendering()
    boxes = sorted((Text.get_window_extent(t) for t in texts), key=lambda b: b.y0)  # the text, not its leader
    assert len(boxes) == 5 and all(a.y1 <= b.y0 + 0.5 for a, b in zip(boxes, boxes[1:]))


def test_include_reference_widens_an_axis_to_zero():
    fig, ax = report.figure()
    ax.plot([0, 1], [58, 72])
    report.include_reference(ax, 0)
    assert ax.get_ylim()[0] <= 0 < 58 < ax.get_ylim()[1]


def test_every_family_has_a_colour_and_activation_rows_their_own():
    rows = [{"name": "b", "baseline": True}, {"name": "w", "weights": "fp8_tensor"},
            {"name": "a", "weights": "fp8_tensor", "activations": "fp8_static"}, {"name": "kv", "kv_cache": "fp8_e4m3"},
            {"name": "k", "staleness": 2}, {"name": "n", "noise_sigma": 0.1}, {"name": "rl", "algorithm": "grpo"},
            {"name": "c", "weights": "fp8_tensor", "staleness": 8}, {"name": "ac", "activations": "fp8_static", "kv_cache": "fp8_e4m3"}]
    fam = {r["name"]: Row.of(r).family for r in rows}
    assert fam["a"] == "activations" and fam["w"] == "weights" and fam["ac"] == "combined"
    assert set(fam.values()) == set(report.FAMILY_COLORS)


def test_verdict_is_the_seed_aware_one_where_known():
    v = pd.DataFrame({"verdict": ["pass", "fail", "pass"], "verdict_seeds": ["fail", None, "pass"]})
    assert report.verdict(v).tolist() == ["fail", "fail", "pass"]
