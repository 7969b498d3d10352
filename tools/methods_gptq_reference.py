#!/usr/bin/env python3
"""An independent GPTQ and MR-GPTQ for qsweep's tests, written from the papers and gptq.py.

GPTQ (Frantar et al., arXiv 2210.17323, Algorithm 1): H = 2 X^T X, dampening 1% of the mean
diagonal, U = the upper Cholesky factor of H^-1, columns quantized in order in lazy batches of
128, the error of column i divided by U_ii and spread over the later columns through row i of U.
Group scales come from the group's weights as they are when its first column is reached.
MR-GPTQ (Egiazarian et al., arXiv 2509.23202), as far as qsweep implements it: the weight and
the calibration inputs multiplied by the block-diagonal Hadamard matrix R of the format's group
size (H_b / sqrt(b), H_b built here by Sylvester's doubling), then GPTQ; with its scale search
(the "mse" observer of the authors' FP-Quant, src/quantization/quantizer.py, as qsweep adapts it
in kernels/methods/scale_search.h): each group's scale the best of the format's rule applied to
the group's amax shrunk by 1 - i * 0.8 / 100 (i = 0..99), by sum |w - q|^2.4, earlier on ties.

The formats' quantizers are written here from their specifications (OCP MX v1.0 for MXFP4 with
the RCEIL scale rule; NVIDIA's NVFP4 two-level scaling in TransformerEngine's operand order; the
symmetric absmax INT4 rule), not taken from qsweep, and checked first: their round-to-nearest
must equal qsweep's bit for bit. Then GPTQ: qsweep's and this one sum in different orders (this
one updates with NumPy outer products and matmuls, qsweep column by column, and the Cholesky
factors come from different routines), so a rounding difference can move a weight across a
decision boundary; the test holds both to the bound printed below.

Usage: methods_gptq_reference.py CASES   (written by tests/methods/gptq_dump.c)
Exit 0 when every case is within its bound, 1 otherwise, 77 (skip) without NumPy."""
import struct
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: NumPy is not installed (pip install numpy)")
    sys.exit(77)

F32 = np.float32
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1_rne(v):
    """Each value onto the signed E2M1 grid, ties to the even code, saturating at 6."""
    v = np.asarray(v, dtype=np.float64)
    a = np.minimum(np.abs(v), 6.0)
    d = np.abs(a[..., None] - E2M1)
    tie = d == d.min(axis=-1, keepdims=True)
    score = np.where(tie, np.arange(8) % 2, 2)
    q = E2M1[np.argmin(score, axis=-1)]
    return np.where(v < 0, -q, q)


def e4m3_rne(v):
    """Positive FP32 values onto E4M3 (bias 7, 3 mantissa bits, 448 max), ties to even."""
    v = np.asarray(v, dtype=np.float64)
    e = np.floor(np.log2(np.maximum(v, 2.0 ** -20)))
    e = np.maximum(e, -6)
    step = 2.0 ** (e - 3)
    return np.minimum(np.round(v / step) * step, 448.0)


class Format:
    """Group size and the scale rule of one format, frozen per group as GPTQ needs."""

    def __init__(self, name, amax_t):
        self.name = name
        self.group = {"nvfp4": 16, "mxfp4": 32, "int4_group": 128}[name]
        if name == "nvfp4":
            self.s_enc = F32(F32(2688.0) / F32(amax_t))
            self.s_dec = F32(F32(1.0) / self.s_enc)

    def scales(self, g):
        """Per-row scale of a group g [rows x group]: (encode, decode) pairs."""
        return self.scales_of_amax(np.abs(g).max(axis=1).astype(F32))

    def scales_of_amax(self, amax):
        """The format's rule on each row's amax."""
        if self.name == "nvfp4":
            sb = e4m3_rne(amax * F32(self.s_enc * F32(1.0 / 6.0))).astype(F32)
            enc = np.minimum(F32(1.0) / (sb * self.s_dec), np.finfo(F32).max).astype(F32)
            return enc, sb
        if self.name == "mxfp4":
            v = (amax * F32(1.0 / 6.0)).astype(np.float64)
            s = np.where(v > 0, np.ceil(np.log2(np.where(v > 0, v, 1.0))), -127)
            s = np.clip(s, -127, 125)
            return (2.0 ** -s).astype(F32), (2.0 ** s).astype(F32)
        s = (amax / F32(7.0)).astype(F32)
        s = np.where(s == 0, F32(1.0), s).astype(F32)
        return s, s

    def quant(self, x, enc, dec):
        x = x.astype(F32)
        if self.name == "int4_group":
            q = np.round(np.clip(x / enc, -7, 7)) + 0.0  # an integer code has no -0
            return (q.astype(F32) * dec).astype(F32)
        e = e2m1_rne((x * enc).astype(F32)).astype(F32)
        y = (e * dec).astype(F32)
        return (y * self.s_dec).astype(F32) if self.name == "nvfp4" else y


def search_error(fmt, g, enc, dec):
    """Per row: sum over the group's columns, in order, of |g - q|^2.4 in float64."""
    d = g.astype(np.float64) - fmt.quant(g, enc[:, None], dec[:, None]).astype(np.float64)
    e = np.zeros(g.shape[0])
    for j in range(g.shape[1]):
        e += np.abs(d[:, j]) ** 2.4
    return e


def searched_scales(fmt, g):
    """MR-GPTQ's scale search on a group g [rows x group]: the best of 100 shrunken amax values."""
    amax = np.abs(g).max(axis=1).astype(F32)
    enc, dec = fmt.scales_of_amax(amax)
    best = search_error(fmt, g, enc, dec)
    for i in range(1, 100):
        f = F32(1.0 - i * 0.8 / 100)
        e2, d2 = fmt.scales_of_amax((amax * f).astype(F32))
        err = search_error(fmt, g, e2, d2)
        better = err < best
        best = np.where(better, err, best)
        enc, dec = np.where(better, e2, enc).astype(F32), np.where(better, d2, dec).astype(F32)
    return enc, dec


def rtn(fmt, w):
    out = np.empty_like(w)
    for c in range(0, w.shape[1], fmt.group):
        g = w[:, c:c + fmt.group]
        enc, dec = fmt.scales(g)
        out[:, c:c + fmt.group] = fmt.quant(g, enc[:, None], dec[:, None])
    return out


def gptq(fmt, w, x, blocksize=128, percdamp=0.01, search=False):
    W = w.astype(F32).copy()
    rows, k = W.shape
    H = 2.0 * x.astype(np.float64).T @ x.astype(np.float64)
    H[np.diag_indices(k)] += percdamp * np.mean(np.diag(H))
    U = np.linalg.cholesky(np.linalg.inv(H)).T.astype(F32)
    Q = np.zeros_like(W)
    enc = dec = None
    for i1 in range(0, k, blocksize):
        i2 = min(i1 + blocksize, k)
        W1 = W[:, i1:i2].copy()
        Err1 = np.zeros_like(W1)
        U1 = U[i1:i2, i1:i2]
        for i in range(i2 - i1):
            if (i1 + i) % fmt.group == 0:
                g = W1[:, i:i + fmt.group]
                enc, dec = searched_scales(fmt, g) if search else fmt.scales(g)
            wcol = W1[:, i]
            q = fmt.quant(wcol, enc, dec)
            Q[:, i1 + i] = q
            err1 = ((wcol - q) / U1[i, i]).astype(F32)
            W1[:, i:] -= np.outer(err1, U1[i, i:]).astype(F32)
            Err1[:, i] = err1
        W[:, i2:] -= (Err1 @ U[i1:i2, i2:]).astype(F32)
    return Q


def block_hadamard(n, b):
    """R [n x n]: block-diagonal, each block the Sylvester H_b / sqrt(b)."""
    h = np.array([[1.0]])
    while h.shape[0] < b:
        h = np.block([[h, h], [h, -h]])
    return np.kron(np.eye(n // b), h / np.sqrt(b))


def layer_error(x, w, q):
    d = x.astype(np.float64) @ (w.astype(np.float64) - q.astype(np.float64)).T
    return float((d * d).sum())


# The bounds GPTQ is held to: the share of weights on a different grid point, and the relative
# difference of the two layer errors on the calibration data.
MAX_DIFFERENT = 0.0
MAX_ERROR_GAP = 1e-5
MAX_DIFFERENT_ROTATED = 0.0


def main(path):
    data = open(path, "rb").read()
    off, ok = 0, True
    while off < len(data):
        name = data[off:off + 16].split(b"\0")[0].decode()
        method = data[off + 16:off + 32].split(b"\0")[0].decode()
        rows, k, t = struct.unpack_from("<3I", data, off + 32)
        off += 44

        def take(n):
            nonlocal off
            a = np.frombuffer(data, dtype="<f4", count=n, offset=off).copy()
            off += 4 * n
            return a

        x = take(t * k).reshape(t, k)
        w = take(rows * k).reshape(rows, k)
        q_rtn = take(rows * k).reshape(rows, k)
        q_gptq = take(rows * k).reshape(rows, k)
        fmt = Format(name, np.abs(w).max())
        ref_rtn = rtn(fmt, w)
        same_rtn = np.array_equal(ref_rtn.view(np.uint32), q_rtn.view(np.uint32))
        e_rtn = layer_error(x, w, q_rtn)  # the unrotated problem's RTN
        if method.startswith("mr-gptq"):  # the rotated problem: x R (W R)^T = x W^T
            r = block_hadamard(k, fmt.group)
            w = (w.astype(np.float64) @ r).astype(F32)
            x = (x.astype(np.float64) @ r).astype(F32)
            fmt = Format(name, np.abs(w).max())
        ref = gptq(fmt, w, x, search=method == "mr-gptq+search")
        # the same grid point: equal within 1e-6 relative, about 8 FP32 ulps and far below half a
        # grid step (1/14 of a value at least). INT4's FP32 group scale, taken from weights the two
        # sum in different orders, carries their last bits; E4M3 and E8M0 scales round them away.
        different = float(np.mean(np.abs(ref - q_gptq) > 1e-6 * np.abs(q_gptq)))
        bitwise = float(np.mean(ref.view(np.uint32) != q_gptq.view(np.uint32)))
        e_ref, e_q = layer_error(x, w, ref), layer_error(x, w, q_gptq)
        gap = abs(e_q - e_ref) / e_ref
        bound = MAX_DIFFERENT if method == "gptq" else MAX_DIFFERENT_ROTATED
        good = same_rtn and different <= bound and gap <= MAX_ERROR_GAP
        ok &= good
        print(f"{'OK' if good else 'NOT OK'} {method} {name}: rtn bit for bit {same_rtn}; gptq weights "
              f"off their grid point {different:.4f} (bound {MAX_DIFFERENT}; bitwise {bitwise:.4f}), layer error qsweep {e_q:.6g} "
              f"reference {e_ref:.6g} gap {gap:.4f} (bound {MAX_ERROR_GAP}), rtn {e_rtn:.6g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
