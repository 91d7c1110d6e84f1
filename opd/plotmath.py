"""Logarithmic axes whose coordinates have the same bits on every CPU, for figures that are the same bytes
wherever they are rebuilt.

matplotlib's log and symlog scales transform data with numpy's np.log10 / np.log / np.exp, whose vector
kernels differ between CPUs (numpy's AVX-512 and AVX2 log10 disagree in the last bit of about one value in
seven), so a marker's position in a PDF, or a pixel of a PNG, could differ between two machines drawing the
same numbers. The scales here are matplotlib's own (same ticks, limits and clipping: subclasses, registered
through matplotlib's public scale registry under LOG and SYMLOG) with the logarithm and the exponential
computed from IEEE-exact operations only (frexp, ldexp and correctly rounded + - x /), which give the same
bits on every CPU, within a few ulps of the true values."""
from __future__ import annotations

import numpy as np
from matplotlib import scale as mscale

LOG, SYMLOG = "opd_log", "opd_symlog"  # the names figure scripts pass to set_xscale / set_yscale
_LN2 = 0.6931471805599453
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10  # fdlibm's split: k * _LN2_HI is exact
_SQRT_HALF = 0.7071067811865476


def exact_log(x) -> np.ndarray:
    """Natural logarithm: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s), s = (m - 1)/(m + 1),
    |s| < 0.172, summed to 1e-17 (Horner over odd powers); zero, negative and non-finite x as np.log gives."""
    x = np.asarray(x, dtype=np.float64)
    special = ~(np.isfinite(x) & (x > 0))
    m, e = np.frexp(np.where(special, 1.0, x))
    low = m < _SQRT_HALF
    m = np.where(low, 2.0 * m, m)
    e = np.where(low, e - 1, e).astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    acc = np.zeros_like(s)
    for k in range(27, 0, -2):
        acc = acc * s2 + 1.0 / k
    out = 2.0 * s * acc + e * _LN2
    if special.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(special, np.log(np.where(special, x, 1.0)), out)  # -inf, nan, inf: exact everywhere
    return out


def exact_exp(y) -> np.ndarray:
    """Exponential: y = k ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor series to 1e-17, times 2^k."""
    y = np.asarray(y, dtype=np.float64)
    finite = np.isfinite(y)
    yy = np.where(finite, np.clip(y, -1100.0, 1100.0), 0.0)
    k = np.floor(yy / _LN2 + 0.5)
    r = (yy - k * _LN2_HI) - k * _LN2_LO
    acc = np.ones_like(r)
    for n in range(22, 0, -1):
        acc = acc * r / n + 1.0
    out = np.ldexp(acc, k.astype(np.int64))
    return np.where(finite, out, np.where(np.isnan(y), y, np.where(y > 0, np.inf, 0.0)))


class _LogTransform(mscale.LogTransform):
    def transform_non_affine(self, values):
        values = np.asarray(values, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = exact_log(values) / exact_log(float(self.base))
            if self._clip:
                out = np.where(values <= 0, -1000.0, out)  # matplotlib's clip, as LogTransform does it
        return out

    def inverted(self):
        return _InvertedLogTransform(self.base)


class _InvertedLogTransform(mscale.InvertedLogTransform):
    def transform_non_affine(self, values):
        return exact_exp(np.asarray(values, dtype=np.float64) * exact_log(float(self.base)))

    def inverted(self):
        return _LogTransform(self.base)


class LogScale(mscale.LogScale):
    """matplotlib's log scale with _LogTransform."""
    name = LOG

    def __init__(self, *args, base=10, subs=None, nonpositive="clip"):  # matplotlib < 3.11 passes the axis
        super().__init__(*args, base=base, subs=subs, nonpositive=nonpositive)
        self._transform = _LogTransform(base, nonpositive)


class _SymLogTransform(mscale.SymmetricalLogTransform):
    def transform_non_affine(self, values):
        values = np.asarray(values, dtype=np.float64)
        adj = self.linscale / (1.0 - 1.0 / self.base)
        log_base = exact_log(float(self.base))
        a = np.abs(values)
        inside = a <= self.linthresh
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.sign(values) * self.linthresh * (adj - exact_log(self.linthresh) / log_base
                                                      + exact_log(np.where(inside, 1.0, a)) / log_base)
        return np.where(inside, values * adj, out)

    def inverted(self):
        return _InvertedSymLogTransform(self.base, self.linthresh, self.linscale)


class _InvertedSymLogTransform(mscale.InvertedSymmetricalLogTransform):
    def transform_non_affine(self, values):
        values = np.asarray(values, dtype=np.float64)
        adj = self.linscale / (1.0 - 1.0 / self.base)
        inv_thresh = self.linthresh * adj
        a = np.abs(values)
        inside = a <= inv_thresh
        out = np.sign(values) * self.linthresh * exact_exp(
            (np.where(inside, inv_thresh, a) / self.linthresh - adj) * exact_log(float(self.base)))
        return np.where(inside, values / adj, out)

    def inverted(self):
        return _SymLogTransform(self.base, self.linthresh, self.linscale)


class SymLogScale(mscale.SymmetricalLogScale):
    """matplotlib's symlog scale with _SymLogTransform."""
    name = SYMLOG

    def __init__(self, *args, base=10, linthresh=2, subs=None, linscale=1):  # matplotlib < 3.11 passes the axis
        super().__init__(*args, base=base, linthresh=linthresh, subs=subs, linscale=linscale)
        self._transform = _SymLogTransform(base, linthresh, linscale)


for _s in (LogScale, SymLogScale):
    mscale.register_scale(_s)
