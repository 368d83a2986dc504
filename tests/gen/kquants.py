"""kquants.py — a numpy quantizer to GGUF's Q4_K and Q6_K blocks, for test models (the
`gguf` package dequantizes every K-quant but quantizes none). It follows the block
layouts of ggml's block_q4_K / block_q6_K with plain min/max scale choice (no search
for the best scale, as llama.cpp's make_qkx2_quants does): the files are valid K-quant
files whose values `gguf.quants.dequantize` reads back, which is what the tests need.

quantize(a, qtype) takes a float32 array [..., k] with k a multiple of 256 and returns the
uint8 rows [..., k / 256 * block bytes], the form gguf.quants.quantize returns.
"""
import numpy as np
from gguf import GGMLQuantizationType as Q

QK_K = 256


def _f16(x):
    return np.asarray(x, dtype=np.float32).astype("<f2")


def _q4_k(x):
    """x: [n, 256] float32 -> [n, 144] uint8."""
    n = x.shape[0]
    sub = x.reshape(n, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)  # the min is never positive (it is subtracted)
    hi = sub.max(axis=2)
    scale = (hi - lo) / 15.0
    mins = -lo
    d = _f16(scale.max(axis=1) / 63.0)
    dmin = _f16(mins.max(axis=1) / 63.0)
    df, dminf = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df[:, None] > 0, np.rint(scale / df[:, None]), 0).clip(0, 63).astype(np.uint8)
        m = np.where(dminf[:, None] > 0, np.rint(mins / dminf[:, None]), 0).clip(0, 63).astype(np.uint8)
        step = df[:, None] * sc.astype(np.float32)
        offset = dminf[:, None] * m.astype(np.float32)
        q = np.where(step[:, :, None] > 0, np.rint((sub + offset[:, :, None]) / step[:, :, None]), 0)
    q = q.clip(0, 15).astype(np.uint8).reshape(n, 4, 2, 32)
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(n, 128)
    # 12 bytes of 6-bit scales and mins (ggml's get_scale_min_k4, inverted).
    scales = np.zeros((n, 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    return np.concatenate([d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), scales, qs], axis=1)


def _q6_k(x):
    """x: [n, 256] float32 -> [n, 210] uint8."""
    n = x.shape[0]
    sub = x.reshape(n, 16, 16)
    # Each sub-block's scale takes its largest magnitude to -32 (the int6 range is -32..31).
    idx = np.abs(sub).argmax(axis=2)
    peak = np.take_along_axis(sub, idx[:, :, None], axis=2)[:, :, 0]
    scale = -peak / 32.0
    d = _f16(np.abs(scale).max(axis=1) / 127.0)
    df = d.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df[:, None] > 0, np.rint(scale / df[:, None]), 0).clip(-128, 127).astype(np.int8)
        step = df[:, None] * sc.astype(np.float32)
        q = np.where(step[:, :, None] != 0, np.rint(sub / step[:, :, None]), 0)
    q = (q.clip(-32, 31) + 32).astype(np.uint8).reshape(n, 2, 4, 32)  # [half, quarter, l]
    ql = np.empty((n, 2, 64), dtype=np.uint8)
    ql[:, :, 0:32] = (q[:, :, 0] & 0x0F) | ((q[:, :, 2] & 0x0F) << 4)
    ql[:, :, 32:64] = (q[:, :, 1] & 0x0F) | ((q[:, :, 3] & 0x0F) << 4)
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)],
                          axis=1)


def quantize(a, qtype):
    a = np.ascontiguousarray(a, dtype=np.float32)
    assert a.shape[-1] % QK_K == 0, f"rows of {a.shape[-1]} values are not whole super-blocks"
    blocks = a.reshape(-1, QK_K)
    out = {Q.Q4_K: _q4_k, Q.Q6_K: _q6_k}[qtype](blocks)
    return out.reshape(*a.shape[:-1], -1)
