//! Valid 1-D convolution over time and max-pooling over time as candle custom ops with exact
//! backward passes on CPU (K shifted-view GEMMs, arg-max scatter), and the composite candle paths
//! the same functions take on any other device.
//!
//! candle 0.11.1's own `conv1d` backward returns wrong gradients on CPU and its `max_pool2d`
//! backward is wrong everywhere, and the composite replacements (unfold by stacked narrow views,
//! reshape + arg-max gather) spend most of a training step copying. Here, on CPU:
//!
//! - [`conv1d`] `x [B, C, T] ⋆ w [F, C, K] (+ bias [F]) → [B, F, T − K + 1]`, rayon over blocks
//!   of 4 or 8 batch items, no im2col: the block's input transposed once to `xt [C, items·T + pad]` in
//!   a per-thread scratch buffer reused across calls, then GEMMs over the strided views
//!   `xt[:, k ..]`, `yᵀ += xt[:, k..]ᵀ · W_kᵀ` (a view costs no copy; rows a multiple of 16 so
//!   `gemm` reads it in place), each item's valid steps copied out with the bias added. When K
//!   is even, two levels of two-tap minimal filtering (`fwd_split`: ±1 coefficients only, so
//!   exact up to rounding) turn the K taps over m steps into 9 convolutions of K / 4 taps over
//!   m / 4 steps of half-rate signals: 9/16 of the multiply-adds.
//!   Backward: `dW_k = dY · xt[:, k..]ᵀ` per block over the same views and the same split
//!   (`grad_split`; `dY` laid out once per block with zeros at the dropped steps), block partial
//!   sums added in block order so `dW` is the same bytes at any thread count; `dX` by K strided GEMMs
//!   `dX_b[:, k..k+T'] += W_kᵀ · dY_b` (no col2im buffer), only when `x` is part of a graph;
//!   `db` a plain reduction (candle's strided `sum` over two axes is slow).
//!   An input and its tangent (the regulariser's forward-mode pass) are two calls with the same
//!   kernel: batching them into one call measured slower (the concatenation costs a copy, and the
//!   GEMMs per block are the same).
//! - [`max_pool_time`] `[.., T] → [.., T / k]` (T cropped to a multiple of k), backward scatters
//!   each window's gradient to its first maximal entry; [`max_pool_time_with_tangent`] also takes
//!   a tangent at the same arg-max.
//! - [`relu_with_tangent`] `relu(x)` and `t · [x > 0]`, one masking pass each way (candle's
//!   `relu` backward is five passes).
//!
//! f32 and f64 take the custom ops on CPU; other dtypes and devices take [`conv1d_unfold`],
//! [`max_pool_time_gather`] and candle's `relu`, the composite paths, which give the same values
//! and gradients (the tests compare them on CPU).

use candle_core::{
    backend::BackendStorage, bail, CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Device,
    Layout, Shape, Tensor, WithDType,
};
use rayon::prelude::*;

use crate::elem::CpuElem;
use crate::gemm::Operand as Mat;
use crate::{Error, Result};

/// Batch items per GEMM block: the forward product and the weight gradient run block by block
/// (rayon over blocks); the weight gradient's per-block partial sums are added in block order, so
/// it is the same bytes at any thread count. 8 with the split GEMMs (below), whose rows are
/// rounded up to a multiple of 64, which wastes less of a longer block (001's conv1: 793 rows →
/// 832, where 4 items gave 393 → 448); 4 without.
fn block_items(levels: usize) -> usize {
    if levels > 0 {
        8
    } else {
        4
    }
}

/// Elements read per rayon task in the row-wise loops (pooling, ReLU masks, bias and block
/// sums); a loop of fewer than two tasks' worth runs on the calling thread, where waking the pool
/// would cost more than it saves.
const PAR_WORK: usize = 1 << 14;

/// Runs `f(first_row, rows)` over `out` split into whole rows of `row` elements, each row reading
/// about `work` input elements: on rayon in tasks of ≈ [`PAR_WORK`] elements, or in one call on
/// this thread when the whole loop is smaller than two tasks. Every output element is written by
/// the same arithmetic either way, so the result is the same bytes at any thread count.
fn par_rows<T: Send>(out: &mut [T], row: usize, work: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let row = row.max(1);
    let rows = out.len() / row;
    if rows.saturating_mul(work) < 2 * PAR_WORK {
        f(0, out);
        return;
    }
    let per = (PAR_WORK / work.max(1)).max(1);
    out.par_chunks_mut(per * row)
        .enumerate()
        .for_each(|(i, chunk)| f(i * per, chunk));
}

/// `dst (m×n, row stride dst_rs, column stride 1) (+)= a (m×k) · b (k×n)`, single-threaded
/// (callers parallelise over batch items).
#[allow(clippy::too_many_arguments)]
fn gemm<T: CpuElem>(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    dst: &mut [T],
    dst_rs: usize,
    accumulate: bool,
) -> candle_core::Result<()> {
    Ok(crate::gemm::gemm(
        (m, n, k),
        a,
        b,
        dst,
        (dst_rs, 1),
        accumulate,
        false,
    )?)
}

/// The contiguous slice of a CPU tensor's storage, or an error naming `what`.
fn slice<'a, T: CpuElem>(
    s: &'a CpuStorage,
    l: &Layout,
    what: &'static str,
) -> candle_core::Result<&'a [T]> {
    let Some((a, b)) = l.contiguous_offsets() else {
        bail!(
            "{what}: expected a contiguous tensor, got strides {:?}",
            l.stride()
        )
    };
    Ok(&T::cpu_storage_as_slice(s)?[a..b])
}

/// Shape of one valid convolution: `x [B, C, T]`, `w [F, C, K]`, output `[B, F, T' = T − K + 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ConvDims {
    b: usize,
    c: usize,
    t: usize,
    f: usize,
    k: usize,
}

impl ConvDims {
    fn out(&self) -> usize {
        self.t + 1 - self.k
    }
    fn from_layouts(lx: &Layout, lw: &Layout) -> candle_core::Result<Self> {
        let (b, c, t) = lx.shape().dims3()?;
        let (f, wc, k) = lw.shape().dims3()?;
        if wc != c || c == 0 || f == 0 || k == 0 || k > t {
            bail!("conv1d: input [{b}, {c}, {t}] and kernel [{f}, {wc}, {k}] do not fit");
        }
        Ok(Self { b, c, t, f, k })
    }
}

/// Rows of a block's shifted-view GEMMs (of the split's leaves, when split) are a multiple of
/// this: 16 f32 (8 f64) lanes fill `gemm`'s AVX-512 micro-kernel rows exactly, so it reads the
/// block's input in place instead of packing it.
const ROW_MULTIPLE: usize = 16;

/// The layout of one block of `items` batch items as the shifted-view GEMMs read it: the block's
/// input transposed to `xt [C, L]`, `xt[c, i·T + t] = x[i, c, t]`, zero past `items·T`; the
/// GEMMs' rows are `n = 0..m` (item `n / T`, step `n % T`, the steps `t ≥ T'` of each item
/// computed and dropped), and tap k reads the view `xt[c, n + k]`.
#[derive(Debug, Clone, Copy)]
struct Shifted {
    /// GEMM rows: `items·T − (K − 1)` (the last item's last valid step) rounded up to
    /// [`ROW_MULTIPLE`] times `2^levels` of the split.
    m: usize,
    /// Row length of `xt`: `m + K − 1`, at least `items·T`.
    l: usize,
}

impl Shifted {
    fn new(items: usize, d: ConvDims) -> Self {
        // each level of the split halves the rows
        let multiple = ROW_MULTIPLE << split_levels(d.k);
        let m = (items * d.t + 1 - d.k).div_ceil(multiple) * multiple;
        Self {
            m,
            l: (m + d.k - 1).max(items * d.t),
        }
    }
}

/// Fills `xt [C, L]` from the block's `xg [items, C, T]` (zeros past `items·T`).
fn transpose_block<T: CpuElem>(xg: &[T], d: ConvDims, s: Shifted, xt: &mut [T]) {
    for (c, row) in xt.chunks_exact_mut(s.l).enumerate() {
        let (data, pad) = row.split_at_mut(xg.len() / d.c);
        for (dst, xb) in data.chunks_exact_mut(d.t).zip(xg.chunks_exact(d.c * d.t)) {
            dst.copy_from_slice(&xb[c * d.t..(c + 1) * d.t]);
        }
        pad.fill(T::ZERO);
    }
}

/// Levels of minimal filtering applied to a convolution with `k` taps: [`SPLIT_LEVELS`], fewer
/// when `k` does not halve that often.
fn split_levels(k: usize) -> usize {
    if split_wanted() {
        (k.trailing_zeros() as usize).min(SPLIT_LEVELS)
    } else {
        0
    }
}

/// Tests take both paths: 1 forces the direct GEMMs, 2 the split ones.
#[cfg(test)]
static SPLIT_OVERRIDE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the split GEMMs are taken where the taps allow: always, except in the tests that
/// compare the two paths.
fn split_wanted() -> bool {
    #[cfg(test)]
    if SPLIT_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) == 1 {
        return false;
    }
    true
}

/// Levels of the two-by-two minimal filtering (below) the convolution's GEMMs go through when the
/// taps allow: each level computes a convolution with K taps over m output steps as three with
/// K / 2 taps over m / 2 steps, 3/4 of the multiply-adds (9/16 for two levels).
const SPLIT_LEVELS: usize = 2;

/// The kernel's taps as the split GEMMs read them: `3^levels` leaves of `K / 2^levels` taps, each
/// tap `Wᵀ [C, F]` row-major, in the order the recursion visits them (per level: the even taps
/// `W₀`, their sums with the odd ones `W₀ + W₁`, the odd taps `W₁`).
fn weight_leaves<T: CpuElem>(w: &[T], d: ConvDims, levels: usize) -> Vec<T> {
    let cf = d.c * d.f;
    // [K, C, F]: wt[k·C·F + c·F + f] = w[f·C·K + c·K + k]
    let mut wt = vec![T::ZERO; d.k * cf];
    for (f, wf) in w.chunks_exact(d.c * d.k).enumerate() {
        for (c, wc) in wf.chunks_exact(d.k).enumerate() {
            for (k, &v) in wc.iter().enumerate() {
                wt[k * cf + c * d.f + f] = v;
            }
        }
    }
    let mut k = d.k;
    for _ in 0..levels {
        let mut next = Vec::with_capacity(wt.len() / 2 * 3);
        for leaf in wt.chunks_exact(k * cf) {
            let tap = |j: usize| &leaf[j * cf..(j + 1) * cf];
            for p in 0..k / 2 {
                next.extend_from_slice(tap(2 * p));
            }
            for p in 0..k / 2 {
                next.extend(tap(2 * p).iter().zip(tap(2 * p + 1)).map(|(&a, &b)| a + b));
            }
            for p in 0..k / 2 {
                next.extend_from_slice(tap(2 * p + 1));
            }
        }
        wt = next;
        k /= 2;
    }
    wt
}

/// One level's half-rate signal `which` of `x [C, ·]` (row stride `lx`) into `sub [C, len]`:
/// 0 → `x[2r] − x[2r + 1]`, 1 → `x[2r + 1]`, 2 → `x[2r + 2] − x[2r + 1]`, for `r < len`.
fn split_signal<T: CpuElem>(x: &[T], lx: usize, which: usize, len: usize, sub: &mut [T]) {
    for (dst, row) in sub.chunks_exact_mut(len).zip(x.chunks(lx)) {
        let pairs = |from: usize| row[from..from + 2 * len].chunks_exact(2);
        match which {
            0 => {
                for (v, p) in dst.iter_mut().zip(pairs(0)) {
                    *v = p[0] - p[1];
                }
            }
            1 => {
                for (v, p) in dst.iter_mut().zip(pairs(1)) {
                    *v = p[0];
                }
            }
            _ => {
                for (v, p) in dst.iter_mut().zip(pairs(1)) {
                    *v = p[1] - p[0];
                }
            }
        }
    }
}

/// Where the split GEMMs leave output step `n` of `m`: each level puts the even steps first, then
/// the odd ones.
fn split_position(n: usize, m: usize, levels: usize) -> usize {
    if levels == 0 {
        n
    } else {
        (n % 2) * (m / 2) + split_position(n / 2, m / 2, levels - 1)
    }
}

/// Scratch elements [`fwd_split`] needs.
fn fwd_scratch(d: ConvDims, k: usize, m: usize, levels: usize) -> usize {
    if levels == 0 {
        return 0;
    }
    let h = m / 2;
    d.c * (h + k / 2 - 1) + d.f * h + fwd_scratch(d, k / 2, h, levels - 1)
}

/// `yᵀ [m, F] (+)= Σ_k x[:, n + k .. ]ᵀ · W_kᵀ`, the valid convolution of the signal `x [C, ·]`
/// (row stride `lx`, at least `m + k − 1` steps) with the `k`-tap kernel `leaves`
/// ([`weight_leaves`]), step `n`'s row at `out[f·cs + split_position(n, m, levels)]`.
///
/// With two taps and two steps, `y₀ = x₀w₀ + x₁w₁`, `y₁ = x₁w₀ + x₂w₁` take three products,
/// `P₁ = (x₀ − x₁)w₀`, `P₂ = x₁(w₀ + w₁)`, `P₃ = (x₂ − x₁)w₁`, as `y₀ = P₁ + P₂`, `y₁ = P₂ + P₃`.
/// Over pairs of taps and pairs of steps, each `P` is itself a convolution with `k / 2` taps over
/// `m / 2` steps of a half-rate signal ([`split_signal`]); every coefficient is ±1, so the result
/// is direct convolution's up to rounding. `m` must be a multiple of `2^levels`, `k` too.
#[allow(clippy::too_many_arguments)]
fn fwd_split<T: CpuElem>(
    (x, lx): (&[T], usize),
    d: ConvDims,
    (k, m, levels): (usize, usize, usize),
    leaves: &[T],
    out: &mut [T],
    cs: usize,
    accumulate: bool,
    scratch: &mut [T],
) -> candle_core::Result<()> {
    let cf = d.c * d.f;
    if levels == 0 {
        for (tap, wk) in leaves.chunks_exact(cf).enumerate() {
            // rows n, columns c: x[c·lx + n + tap]
            let a = Mat {
                data: &x[tap..],
                rs: 1,
                cs: lx,
            };
            let b = Mat {
                data: wk,
                rs: d.f,
                cs: 1,
            };
            crate::gemm::gemm(
                (m, d.f, d.c),
                a,
                b,
                out,
                (1, cs),
                accumulate || tap > 0,
                false,
            )?;
        }
        return Ok(());
    }
    let (h, kh) = (m / 2, k / 2);
    let len = h + kh - 1;
    let (sub, rest) = scratch.split_at_mut(d.c * len);
    let (p2, rest) = rest.split_at_mut(d.f * h);
    let third = leaves.len() / 3;
    let next = (kh, h, levels - 1);
    // P₁ into the even steps, P₃ into the odd ones, P₂ to both
    split_signal(x, lx, 0, len, sub);
    fwd_split(
        (&*sub, len),
        d,
        next,
        &leaves[..third],
        out,
        cs,
        accumulate,
        rest,
    )?;
    split_signal(x, lx, 2, len, sub);
    let odd = &mut out[h..];
    fwd_split(
        (&*sub, len),
        d,
        next,
        &leaves[2 * third..],
        odd,
        cs,
        accumulate,
        rest,
    )?;
    split_signal(x, lx, 1, len, sub);
    let mid = &leaves[third..2 * third];
    fwd_split((&*sub, len), d, next, mid, p2, h, false, rest)?;
    for (col, p) in out.chunks_mut(cs).zip(p2.chunks_exact(h)) {
        let (even, odd) = col[..m].split_at_mut(h);
        for ((e, o), &v) in even.iter_mut().zip(odd).zip(p) {
            *e += v;
            *o += v;
        }
    }
    Ok(())
}

/// Forward, rayon over blocks of [`block_items`] batch items, without im2col: the block's input
/// transposed once to `xt [C, L]` (this thread's scratch), then the shifted-view GEMMs of
/// [`fwd_split`], `yᵀ [m, F] += xt[:, k .. k + m]ᵀ · W_kᵀ` (the views are strided, so a tap
/// costs no copy), and each item's valid steps copied into `y [B, F, T']` with the bias added.
fn conv_forward<T: CpuElem>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    d: ConvDims,
) -> candle_core::Result<Vec<T>> {
    let out = d.out();
    let levels = split_levels(d.k);
    let leaves = weight_leaves(w, d, levels);
    let block = block_items(levels);
    let mut y = vec![T::ZERO; d.b * d.f * out];
    y.par_chunks_mut(block * d.f * out)
        .zip(x.par_chunks(block * d.c * d.t))
        .try_for_each(|(yg, xg)| {
            let s = Shifted::new(xg.len() / (d.c * d.t), d);
            T::with_scratch(|buf| {
                buf.resize(
                    d.c * s.l + s.m * d.f + fwd_scratch(d, d.k, s.m, levels),
                    T::ZERO,
                );
                let (xt, rest) = buf.split_at_mut(d.c * s.l);
                let (yt, rest) = rest.split_at_mut(s.m * d.f);
                transpose_block(xg, d, s, xt);
                let shape = (d.k, s.m, levels);
                fwd_split((&*xt, s.l), d, shape, &leaves, yt, s.m, false, rest)?;
                let pos: Vec<usize> = (0..xg.len() / d.c)
                    .map(|n| split_position(n, s.m, levels))
                    .collect();
                for (yb, pb) in yg.chunks_exact_mut(d.f * out).zip(pos.chunks_exact(d.t)) {
                    for (f, row) in yb.chunks_exact_mut(out).enumerate() {
                        let bv = bias.map_or(T::ZERO, |b| b[f]);
                        let col = &yt[f * s.m..(f + 1) * s.m];
                        for (v, &p) in row.iter_mut().zip(pb) {
                            *v = col[p] + bv;
                        }
                    }
                }
                Ok::<(), candle_core::Error>(())
            })
        })?;
    Ok(y)
}

/// Taps whose weight gradients one GEMM computes: the GEMM's rows are the group's `J` shifted
/// copies of `dY` (`J·F` rows), where one GEMM per tap had `F` rows, too few for `gemm`'s widest
/// micro-kernels.
const TAP_GROUP: usize = 4;

/// Scratch elements [`grad_split`] needs.
fn grad_scratch(d: ConvDims, k: usize, m: usize, levels: usize) -> usize {
    if levels == 0 {
        let group = TAP_GROUP.min(k);
        return (m + group - 1) * group * d.f;
    }
    let (h, kh) = (m / 2, k / 2);
    d.c * (h + kh - 1) + h * d.f + 2 * d.c * kh * d.f + grad_scratch(d, kh, h, levels - 1)
}

/// The weight gradient of [`fwd_split`]'s convolution: `out [C, k, F]`,
/// `out[c·k·F + j·F + f] = Σ_{n < m} a[n·F + f] · x[c·lx + n + j]`, for `a = dYᵀ [m, F]`.
///
/// The same split transposed: with `a₀, a₁` the even and odd steps of `a` and `x₀, x₁, x₂` the
/// half-rate signals as in the forward pass, the even taps are `M₁ + M₂` and the odd taps
/// `M₂ + M₃`, `M₁ = a₀ ⋆ (x₀ − x₁)`, `M₂ = (a₀ + a₁) ⋆ x₁`, `M₃ = a₁ ⋆ (x₂ − x₁)`, each a weight
/// gradient with `k / 2` taps over `m / 2` steps. At the leaves, `J` shifted copies of `a`,
/// `A [J·F, m + J − 1]` column-major, `A[j·F + f, n] = a[n − j, f]` (zero outside `0..m`), so
/// that one GEMM over the shifted view `x[:, k0 ..]` gives taps `k0 .. k0 + J`, written
/// column-major (the layout `gemm`'s kernels store to directly).
fn grad_split<T: CpuElem>(
    (x, lx): (&[T], usize),
    d: ConvDims,
    (k, m, levels): (usize, usize, usize),
    a: &[T],
    out: &mut [T],
    scratch: &mut [T],
) -> candle_core::Result<()> {
    if levels == 0 {
        let group = TAP_GROUP.min(k);
        let jf = group * d.f;
        let shifted = &mut scratch[..(m + group - 1) * jf];
        // A[j·F + f, n] at shifted[n·J·F + j·F + f] = a[(n − j)·F + f]
        for (n, col) in shifted.chunks_exact_mut(jf).enumerate() {
            for (j, dst) in col.chunks_exact_mut(d.f).enumerate() {
                match n.checked_sub(j).filter(|&src| src < m) {
                    Some(src) => dst.copy_from_slice(&a[src * d.f..(src + 1) * d.f]),
                    None => dst.fill(T::ZERO),
                }
            }
        }
        for k0 in (0..k).step_by(group) {
            let taps = group.min(k - k0);
            let am = Mat {
                data: &shifted[..],
                rs: 1,
                cs: jf,
            };
            // x shifted, transposed: [n, c] at x[c·lx + n + k0]
            let b = Mat {
                data: &x[k0..],
                rs: 1,
                cs: lx,
            };
            let shape = (taps * d.f, d.c, m + taps - 1);
            crate::gemm::gemm(
                shape,
                am,
                b,
                &mut out[k0 * d.f..],
                (1, k * d.f),
                false,
                false,
            )?;
        }
        return Ok(());
    }
    let (h, kh) = (m / 2, k / 2);
    let len = h + kh - 1;
    let half = d.c * kh * d.f;
    let (sub, rest) = scratch.split_at_mut(d.c * len);
    let (asub, rest) = rest.split_at_mut(h * d.f);
    let (m2, rest) = rest.split_at_mut(half);
    let (m13, rest) = rest.split_at_mut(half);
    let next = (kh, h, levels - 1);
    // M₂ = (a₀ + a₁) ⋆ x₁
    split_signal(x, lx, 1, len, sub);
    for (src, dst) in a[..m * d.f]
        .chunks_exact(2 * d.f)
        .zip(asub.chunks_exact_mut(d.f))
    {
        let (a0, a1) = src.split_at(d.f);
        for ((v, &p), &q) in dst.iter_mut().zip(a0).zip(a1) {
            *v = p + q;
        }
    }
    grad_split((&*sub, len), d, next, asub, m2, rest)?;
    for (which, parity) in [(0, 0), (2, 1)] {
        // M₁ = a₀ ⋆ (x₀ − x₁) for the even taps, M₃ = a₁ ⋆ (x₂ − x₁) for the odd ones
        split_signal(x, lx, which, len, sub);
        for (src, dst) in a[..m * d.f]
            .chunks_exact(2 * d.f)
            .zip(asub.chunks_exact_mut(d.f))
        {
            dst.copy_from_slice(&src[parity * d.f..(parity + 1) * d.f]);
        }
        grad_split((&*sub, len), d, next, asub, m13, rest)?;
        for ((oc, m2c), m13c) in out
            .chunks_exact_mut(k * d.f)
            .zip(m2.chunks_exact(kh * d.f))
            .zip(m13.chunks_exact(kh * d.f))
        {
            for ((o, p2), p13) in oc
                .chunks_exact_mut(2 * d.f)
                .zip(m2c.chunks_exact(d.f))
                .zip(m13c.chunks_exact(d.f))
            {
                let o = &mut o[parity * d.f..(parity + 1) * d.f];
                for ((v, &p), &q) in o.iter_mut().zip(p2).zip(p13) {
                    *v = p + q;
                }
            }
        }
    }
    Ok(())
}

/// `dW [F, C, K] = Σ_blocks` of each block's weight gradient, rayon over blocks. Per block, the
/// input transposed as in the forward pass (`xt [C, L]`), `dY` laid out as `dYᵀ [m, F]` with zeros
/// at the dropped steps, and [`grad_split`]'s GEMMs over shifted views of `xt` into the block's
/// partial sum `[C, K, F]`; the partial sums are added in block order, then transposed once into
/// `dW`'s `[F, C, K]`.
fn conv_grad_kernel<T: CpuElem>(x: &[T], dy: &[T], d: ConvDims) -> candle_core::Result<Vec<T>> {
    let out = d.out();
    let ck = d.c * d.k;
    let levels = split_levels(d.k);
    let block = block_items(levels);
    let partial = x
        .par_chunks(block * d.c * d.t)
        .zip(dy.par_chunks(block * d.f * out))
        .map(|(xg, dyg)| -> candle_core::Result<Vec<T>> {
            let items = xg.len() / (d.c * d.t);
            let s = Shifted::new(items, d);
            T::with_scratch(|buf| {
                buf.resize(
                    d.c * s.l + s.m * d.f + grad_scratch(d, d.k, s.m, levels),
                    T::ZERO,
                );
                let (xt, rest) = buf.split_at_mut(d.c * s.l);
                let (dyt, rest) = rest.split_at_mut(s.m * d.f);
                transpose_block(xg, d, s, xt);
                layout_dy_block(dyg, d, s, items, dyt);
                let mut acc = vec![T::ZERO; d.k * d.c * d.f];
                grad_split((&*xt, s.l), d, (d.k, s.m, levels), dyt, &mut acc, rest)?;
                Ok(acc)
            })
        })
        .collect::<candle_core::Result<Vec<_>>>()?;
    // Each element summed over the blocks in block order (the first block, then += the others),
    // in the partial sums' layout, then transposed into dW's [F, C, K].
    let mut dw = vec![T::ZERO; d.f * ck];
    if let Some((first, rest)) = partial.split_first() {
        let mut sum = first.clone();
        par_rows(&mut sum, 1, partial.len(), |j0, chunk| {
            for g in rest {
                for (a, &v) in chunk.iter_mut().zip(&g[j0..]) {
                    *a += v;
                }
            }
        });
        for (c, col) in sum.chunks_exact(d.k * d.f).enumerate() {
            for (k, tap) in col.chunks_exact(d.f).enumerate() {
                for (f, &v) in tap.iter().enumerate() {
                    dw[f * ck + c * d.k + k] = v;
                }
            }
        }
    }
    Ok(dw)
}

/// Steps of `dY` transposed per tile (a tile's `[STEP_TILE, F]` rows of `dYᵀ` stay in L1).
const STEP_TILE: usize = 16;

/// Lays one block's `dY [items, F, T']` out as `dYᵀ [m, F]`, `dyt[(i·T + t)·F + f] = dY[i, f, t]`,
/// zero at the dropped steps `t ≥ T'` of each item and past `items·T`; transposed in tiles of
/// [`STEP_TILE`] steps.
fn layout_dy_block<T: CpuElem>(dyg: &[T], d: ConvDims, s: Shifted, items: usize, dyt: &mut [T]) {
    let out = d.out();
    for (i, dyb) in dyg.chunks_exact(d.f * out).enumerate() {
        let base = i * d.t;
        for t0 in (0..out).step_by(STEP_TILE) {
            let t1 = (t0 + STEP_TILE).min(out);
            for (f, row) in dyb.chunks_exact(out).enumerate() {
                for (t, &v) in row[t0..t1].iter().enumerate() {
                    dyt[(base + t0 + t) * d.f + f] = v;
                }
            }
        }
        // the item's dropped steps t = T' .. T
        dyt[(base + out) * d.f..(base + d.t).min(s.m) * d.f].fill(T::ZERO);
    }
    if items * d.t < s.m {
        dyt[items * d.t * d.f..s.m * d.f].fill(T::ZERO);
    }
}

/// `db [F] = Σ_{b,t} dY[b, f, t]`, in a fixed order.
fn conv_grad_bias<T: CpuElem>(dy: &[T], f: usize, out: usize) -> Vec<T> {
    let mut db = vec![T::ZERO; f];
    if f == 0 || out == 0 {
        return db;
    }
    // per filter: the items in order, each item's row summed first
    par_rows(&mut db, 1, dy.len() / f, |f0, accs| {
        for item in dy.chunks_exact(f * out) {
            for (acc, row) in accs.iter_mut().zip(item[f0 * out..].chunks_exact(out)) {
                let mut s = T::ZERO;
                for &v in row {
                    s += v;
                }
                *acc += s;
            }
        }
    });
    db
}

/// `dX_b [C, T]`: for each tap k, `dX_b[:, k .. k + T'] += W_kᵀ [C, F] · dY_b [F, T']`.
fn conv_grad_input<T: CpuElem>(w: &[T], dy: &[T], d: ConvDims) -> candle_core::Result<Vec<T>> {
    let out = d.out();
    let ck = d.c * d.k;
    let mut dx = vec![T::from_f64(0.0); d.b * d.c * d.t];
    dx.par_chunks_mut(d.c * d.t)
        .zip(dy.par_chunks(d.f * out))
        .try_for_each(|(dxb, dyb)| {
            for k in 0..d.k {
                // W_kᵀ[c, f] = w[f·C·K + c·K + k]
                let a = Mat {
                    data: &w[k..],
                    rs: d.k,
                    cs: ck,
                };
                let b = Mat {
                    data: dyb,
                    rs: out,
                    cs: 1,
                };
                gemm(d.c, out, d.f, a, b, &mut dxb[k..], d.t, true)?;
            }
            Ok::<(), candle_core::Error>(())
        })?;
    Ok(dx)
}

/// Runs `$body` with `$T` bound to the element type of `$dtype` (f32 or f64).
macro_rules! float_dispatch {
    ($dtype:expr, $name:expr, |$T:ident| $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            other => bail!("{}: no CPU kernel for {other:?} (f32 and f64 only)", $name),
        }
    };
}

/// The forward op without bias: `(x, w)`.
struct Conv1d;
/// The forward op with bias: `(x, w, bias)`.
struct Conv1dBias;
/// Backward for the kernel: `(x, dY) → dW`.
struct Conv1dGradKernel;
/// Backward for the bias: `dY → db`.
struct Conv1dGradBias;
/// Backward for the input: `(w, dY) → dX`, `t` the input length.
struct Conv1dGradInput {
    t: usize,
}

/// The forward pass shared by both forward ops.
fn conv_fwd_cpu(
    name: &'static str,
    (sx, lx): (&CpuStorage, &Layout),
    (sw, lw): (&CpuStorage, &Layout),
    bias: Option<(&CpuStorage, &Layout)>,
) -> candle_core::Result<(CpuStorage, Shape)> {
    let d = ConvDims::from_layouts(lx, lw)?;
    if let Some((_, lb)) = bias {
        if lb.shape().dims() != [d.f] {
            bail!(
                "conv1d: bias {:?} does not match {} filters",
                lb.shape(),
                d.f
            );
        }
    }
    float_dispatch!(sx.dtype(), name, |T| {
        let bias = match bias {
            Some((sb, lb)) => Some(slice::<T>(sb, lb, "conv1d bias")?),
            None => None,
        };
        let x = slice(sx, lx, "conv1d input")?;
        let y = conv_forward::<T>(x, slice(sw, lw, "conv1d kernel")?, bias, d)?;
        Ok((T::to_cpu_storage_owned(y), Shape::from((d.b, d.f, d.out()))))
    })
}

/// Gradients of a conv node: `dX` (when `x` is tracked), `dW`, `db` (when a bias was given).
fn conv_backward(
    x: &Tensor,
    w: &Tensor,
    has_bias: bool,
    grad: &Tensor,
) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let grad = grad.contiguous()?;
    let dw = if w.track_op() {
        Some(x.apply_op2_no_bwd(&grad, &Conv1dGradKernel)?)
    } else {
        None
    };
    let dx = if x.track_op() {
        Some(w.apply_op2_no_bwd(&grad, &Conv1dGradInput { t: x.dim(2)? })?)
    } else {
        None
    };
    let db = if has_bias {
        Some(grad.apply_op1_no_bwd(&Conv1dGradBias)?)
    } else {
        None
    };
    Ok((dx, dw, db))
}

impl CustomOp2 for Conv1d {
    fn name(&self) -> &'static str {
        "invar-conv1d"
    }
    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sw: &CpuStorage,
        lw: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        conv_fwd_cpu(self.name(), (sx, lx), (sw, lw), None)
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = conv_backward(x, w, false, grad)?;
        Ok((dx, dw))
    }
}

impl CustomOp3 for Conv1dBias {
    fn name(&self) -> &'static str {
        "invar-conv1d-bias"
    }
    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sw: &CpuStorage,
        lw: &Layout,
        sb: &CpuStorage,
        lb: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        conv_fwd_cpu(self.name(), (sx, lx), (sw, lw), Some((sb, lb)))
    }
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        conv_backward(x, w, true, grad)
    }
}

impl CustomOp2 for Conv1dGradKernel {
    fn name(&self) -> &'static str {
        "invar-conv1d-grad-kernel"
    }
    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sg: &CpuStorage,
        lg: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, c, t) = lx.shape().dims3()?;
        let (gb, f, out) = lg.shape().dims3()?;
        if gb != b || out == 0 || out > t {
            bail!("conv1d backward: input [{b}, {c}, {t}] and output gradient [{gb}, {f}, {out}]");
        }
        let d = ConvDims {
            b,
            c,
            t,
            f,
            k: t + 1 - out,
        };
        float_dispatch!(sx.dtype(), self.name(), |T| {
            let dy = slice::<T>(sg, lg, "conv1d output gradient")?;
            let dw = conv_grad_kernel::<T>(slice(sx, lx, "conv1d input")?, dy, d)?;
            Ok((T::to_cpu_storage_owned(dw), Shape::from((d.f, d.c, d.k))))
        })
    }
}

impl CustomOp1 for Conv1dGradBias {
    fn name(&self) -> &'static str {
        "invar-conv1d-grad-bias"
    }
    fn cpu_fwd(&self, sg: &CpuStorage, lg: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, f, out) = lg.shape().dims3()?;
        float_dispatch!(sg.dtype(), self.name(), |T| {
            let dy = slice::<T>(sg, lg, "conv1d output gradient")?;
            Ok((
                T::to_cpu_storage_owned(conv_grad_bias(dy, f, out)),
                Shape::from(f),
            ))
        })
    }
}

impl CustomOp2 for Conv1dGradInput {
    fn name(&self) -> &'static str {
        "invar-conv1d-grad-input"
    }
    fn cpu_fwd(
        &self,
        sw: &CpuStorage,
        lw: &Layout,
        sg: &CpuStorage,
        lg: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (f, c, k) = lw.shape().dims3()?;
        let (b, gf, out) = lg.shape().dims3()?;
        if gf != f || k == 0 || out + k - 1 != self.t {
            bail!(
                "conv1d backward: kernel [{f}, {c}, {k}], output gradient [{b}, {gf}, {out}], input length {}",
                self.t
            );
        }
        let d = ConvDims {
            b,
            c,
            t: self.t,
            f,
            k,
        };
        float_dispatch!(sw.dtype(), self.name(), |T| {
            let dx = conv_grad_input::<T>(
                slice(sw, lw, "conv1d kernel")?,
                slice(sg, lg, "conv1d output gradient")?,
                d,
            )?;
            Ok((T::to_cpu_storage_owned(dx), Shape::from((d.b, d.c, d.t))))
        })
    }
}

/// Whether `x` takes the custom CPU kernels (f32/f64 on CPU) rather than the composite path.
fn has_cpu_kernel(x: &Tensor) -> bool {
    matches!(x.device(), Device::Cpu) && matches!(x.dtype(), DType::F32 | DType::F64)
}

/// Checks `x [B, C, T]`, `w [F, C, K]` (C, F ≥ 1, 1 ≤ K ≤ T) and `bias [F]`.
fn check_conv(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<()> {
    let shape_err = || Error::Shape {
        op: "conv1d (input [B, C, T], kernel [F, C, K ≤ T])",
        left: x.dims().to_vec(),
        right: w.dims().to_vec(),
    };
    let (_, c, t) = x.dims3().map_err(|_| shape_err())?;
    let (f, wc, k) = w.dims3().map_err(|_| shape_err())?;
    if wc != c || c == 0 || f == 0 || k == 0 || k > t {
        return Err(shape_err());
    }
    if let Some(bias) = bias {
        if bias.dims() != [f] {
            return Err(Error::Shape {
                op: "conv1d bias (one per filter)",
                left: bias.dims().to_vec(),
                right: vec![f],
            });
        }
    }
    Ok(())
}

/// Valid, stride-1 cross-correlation over the last axis: `x [B, C, T]`, `w [F, C, K]`, optional
/// `bias [F]` → `y [B, F, T − K + 1]`, `y[b, f, t] = bias[f] + Σ_{c,k} w[f, c, k] · x[b, c, t + k]`.
///
/// On CPU (f32, f64) a shifted-view GEMM custom op (no im2col) with exact gradients for `x`, `w` and `bias`;
/// elsewhere [`conv1d_unfold`].
pub fn conv1d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    check_conv(x, w, bias)?;
    if !has_cpu_kernel(x) {
        return conv1d_unfold(x, w, bias);
    }
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    Ok(match bias {
        Some(bias) => x.apply_op3(&w, &bias.contiguous()?, Conv1dBias)?,
        None => x.apply_op2(&w, Conv1d)?,
    })
}

/// `x + bias[f]` along the filter axis of `x [B, F, T]` (CustomOp2); backward: the gradient
/// itself for `x` and one sum per filter for `bias` (as [`Conv1dGradBias`]).
struct ChannelBias;

fn add_channel_bias<T: CpuElem>(x: &[T], bias: &[T], t: usize) -> Vec<T> {
    let mut y = x.to_vec();
    for item in y.chunks_exact_mut(bias.len() * t) {
        for (row, &b) in item.chunks_exact_mut(t).zip(bias) {
            for v in row {
                *v += b;
            }
        }
    }
    y
}

impl CustomOp2 for ChannelBias {
    fn name(&self) -> &'static str {
        "invar-channel-bias"
    }
    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sb: &CpuStorage,
        lb: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, f, t) = lx.shape().dims3()?;
        if lb.shape().dims() != [f] {
            bail!("channel bias: {:?} for {f} filters", lb.shape());
        }
        float_dispatch!(sx.dtype(), self.name(), |T| {
            let x = slice::<T>(sx, lx, "channel bias input")?;
            let b = slice::<T>(sb, lb, "channel bias")?;
            Ok((
                T::to_cpu_storage_owned(add_channel_bias(x, b, t)),
                lx.shape().clone(),
            ))
        })
    }
    fn bwd(
        &self,
        _x: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let db = grad.apply_op1_no_bwd(&Conv1dGradBias)?;
        Ok((Some(grad), Some(db)))
    }
}

/// `(conv1d(x, w, bias), conv1d(x, w))`: a layer's output and the tangent it carries when the
/// input's tangent is the input itself (the scale nuisance, `∂(αx)/∂α = x`): a convolution is
/// linear, so the tangent is the output without its bias. On CPU one convolution forward and,
/// backward, one weight gradient (of the two outputs' summed gradients) serve both, where two
/// [`conv1d`] calls cost two of each; the values are the same bits as those two calls, the
/// gradients the same up to float rounding. Elsewhere [`conv1d_unfold`] and a broadcast add.
pub fn conv1d_with_self_tangent(x: &Tensor, w: &Tensor, bias: &Tensor) -> Result<(Tensor, Tensor)> {
    check_conv(x, w, Some(bias))?;
    if !has_cpu_kernel(x) {
        let t = conv1d_unfold(x, w, None)?;
        let y = t.broadcast_add(&bias.reshape((1, (), 1))?)?;
        return Ok((y, t));
    }
    let t = conv1d(x, w, None)?;
    let y = t.apply_op2(&bias.contiguous()?, ChannelBias)?;
    Ok((y, t))
}

/// The composite path of [`conv1d`] from candle primitives, on any device: K shifted views
/// stacked into `[B·T', C·K]` and one matrix product. Same values and gradients, more copies.
pub fn conv1d_unfold(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    check_conv(x, w, bias)?;
    let (b, c, t) = x.dims3()?;
    let (f, _, k) = w.dims3()?;
    let out = t - k + 1;
    let views = (0..k)
        .map(|i| x.narrow(2, i, out))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let cols = Tensor::stack(&views, 3)? // [B, C, T', K]
        .permute((0, 2, 1, 3))?
        .contiguous()?
        .reshape((b * out, c * k))?; // [B·T', C·K]
    let y = cols.matmul(&w.reshape((f, c * k))?.t()?)?; // [B·T', F]
    let y = y.reshape((b, out, f))?.transpose(1, 2)?.contiguous()?;
    Ok(match bias {
        Some(bias) => y.broadcast_add(&bias.reshape((1, (), 1))?)?,
        None => y,
    })
}

/// Index of the first maximal entry of `w` (NaN never wins over a number).
#[inline]
fn argmax_first<T: CpuElem>(w: &[T]) -> usize {
    let (mut best, mut top) = (0, w[0]);
    for (i, &v) in w.iter().enumerate().skip(1) {
        if v > top {
            best = i;
            top = v;
        }
    }
    best
}

/// `[.., T] → [.., T / k]`: each window's value of `src` at the arg-max of `key` (`src == key`
/// for plain pooling).
fn pool_gather<T: CpuElem>(key: &[T], src: &[T], len: usize, k: usize) -> Vec<T> {
    let n = len / k;
    let mut y = vec![T::ZERO; key.len() / len * n];
    par_rows(&mut y, n, len, |r0, ys| {
        let rows = key[r0 * len..]
            .chunks_exact(len)
            .zip(src[r0 * len..].chunks_exact(len));
        for (yr, (kr, sr)) in ys.chunks_exact_mut(n).zip(rows) {
            let windows = kr[..n * k].chunks_exact(k).zip(sr[..n * k].chunks_exact(k));
            for (yv, (kw, sw)) in yr.iter_mut().zip(windows) {
                *yv = sw[argmax_first(kw)];
            }
        }
    });
    y
}

/// `[.., T / k] → [.., T]`: each window's gradient placed at the arg-max of `key`, zeros elsewhere.
fn pool_scatter<T: CpuElem>(key: &[T], grad: &[T], len: usize, k: usize) -> Vec<T> {
    let n = len / k;
    let mut dx = vec![T::ZERO; key.len()];
    par_rows(&mut dx, len, len, |r0, dxs| {
        let rows = key[r0 * len..]
            .chunks_exact(len)
            .zip(grad[r0 * n.max(1)..].chunks_exact(n.max(1)));
        for (dr, (kr, gr)) in dxs.chunks_exact_mut(len).zip(rows) {
            for ((kw, &g), dw) in kr[..n * k]
                .chunks_exact(k)
                .zip(gr)
                .zip(dr[..n * k].chunks_exact_mut(k))
            {
                dw[argmax_first(kw)] = g;
            }
        }
    });
    dx
}

/// Max-pool forward `x → y` (CustomOp1); backward scatters to the arg-max.
struct MaxPool {
    k: usize,
}
/// `(t, x) → t` at the arg-max of `x` (CustomOp2); backward scatters into `t` only (the arg-max
/// is piecewise constant in `x`).
struct PoolGather {
    k: usize,
}
/// `(x, grad) → dx` with `grad` at the arg-max of `x`.
struct PoolScatter {
    k: usize,
}

fn pooled_shape(l: &Layout, k: usize) -> candle_core::Result<(usize, Shape)> {
    let dims = l.shape().dims();
    let Some((&len, lead)) = dims.split_last() else {
        bail!("max_pool_time: a scalar has no time axis");
    };
    if k == 0 || k > len {
        bail!("max_pool_time: width {k} does not fit a time axis of {len}");
    }
    let mut out = lead.to_vec();
    out.push(len / k);
    Ok((len, Shape::from(out)))
}

impl CustomOp1 for MaxPool {
    fn name(&self) -> &'static str {
        "invar-max-pool-time"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (len, shape) = pooled_shape(l, self.k)?;
        float_dispatch!(s.dtype(), self.name(), |T| {
            let x = slice::<T>(s, l, "max_pool_time input")?;
            Ok((
                T::to_cpu_storage_owned(pool_gather(x, x, len, self.k)),
                shape,
            ))
        })
    }
    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(
            &grad.contiguous()?,
            &PoolScatter { k: self.k },
        )?))
    }
}

impl CustomOp2 for PoolGather {
    fn name(&self) -> &'static str {
        "invar-max-pool-time-gather"
    }
    fn cpu_fwd(
        &self,
        st: &CpuStorage,
        lt: &Layout,
        sx: &CpuStorage,
        lx: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (len, shape) = pooled_shape(lx, self.k)?;
        if lt.shape() != lx.shape() {
            bail!(
                "max_pool_time: tangent {:?} differs from input {:?}",
                lt.shape(),
                lx.shape()
            );
        }
        float_dispatch!(sx.dtype(), self.name(), |T| {
            let x = slice::<T>(sx, lx, "max_pool_time input")?;
            let t = slice::<T>(st, lt, "max_pool_time tangent")?;
            Ok((
                T::to_cpu_storage_owned(pool_gather(x, t, len, self.k)),
                shape,
            ))
        })
    }
    fn bwd(
        &self,
        _t: &Tensor,
        x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let dt = x.apply_op2_no_bwd(&grad.contiguous()?, &PoolScatter { k: self.k })?;
        Ok((Some(dt), None))
    }
}

impl CustomOp2 for PoolScatter {
    fn name(&self) -> &'static str {
        "invar-max-pool-time-scatter"
    }
    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sg: &CpuStorage,
        lg: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (len, shape) = pooled_shape(lx, self.k)?;
        if lg.shape() != &shape {
            bail!(
                "max_pool_time backward: gradient {:?}, expected {:?}",
                lg.shape(),
                shape
            );
        }
        float_dispatch!(sx.dtype(), self.name(), |T| {
            let x = slice::<T>(sx, lx, "max_pool_time input")?;
            let g = slice::<T>(sg, lg, "max_pool_time gradient")?;
            Ok((
                T::to_cpu_storage_owned(pool_scatter(x, g, len, self.k)),
                lx.shape().clone(),
            ))
        })
    }
}

fn check_pool(x: &Tensor, k: usize) -> Result<()> {
    let len = x.dims().last().copied().unwrap_or(0);
    if k == 0 || k > len {
        return Err(Error::Shape {
            op: "max_pool_time (width 1 ≤ k ≤ T, input [.., T])",
            left: vec![k],
            right: x.dims().to_vec(),
        });
    }
    Ok(())
}

/// Max-pooling of width `k` over the last axis: `[.., T] → [.., T / k]`, T cropped to a multiple
/// of `k`. The gradient of each window goes to its first maximal entry, all others get zero.
///
/// On CPU (f32, f64) a custom op; elsewhere [`max_pool_time_gather`].
pub fn max_pool_time(x: &Tensor, k: usize) -> Result<Tensor> {
    check_pool(x, k)?;
    if !has_cpu_kernel(x) {
        return Ok(max_pool_time_gather(x, None, k)?.0);
    }
    Ok(x.contiguous()?.apply_op1(MaxPool { k })?)
}

/// [`max_pool_time`] of `x` and the tangent `t` (same shape) taken at each window's arg-max of
/// `x`: returns `(pool(x), t at argmax)`. The arg-max is a constant of the graph (piecewise
/// constant in `x`), so `t`'s gradient is a scatter and `x` gets none through the tangent.
pub fn max_pool_time_with_tangent(x: &Tensor, t: &Tensor, k: usize) -> Result<(Tensor, Tensor)> {
    check_pool(x, k)?;
    if x.dims() != t.dims() {
        return Err(Error::Shape {
            op: "max_pool_time_with_tangent (input and tangent)",
            left: x.dims().to_vec(),
            right: t.dims().to_vec(),
        });
    }
    if !has_cpu_kernel(x) {
        let (y, ty) = max_pool_time_gather(x, Some(t), k)?;
        return Ok((y, ty.unwrap_or_else(|| t.clone())));
    }
    let x = x.contiguous()?;
    let y = x.apply_op1(MaxPool { k })?;
    // The arg-max key is detached: the tangent's value never depends on x differentiably.
    let key = x.detach();
    let ty = t.contiguous()?.apply_op2(&key, PoolGather { k })?;
    Ok((y, ty))
}

/// The composite path of [`max_pool_time`] from candle primitives, on any device: reshape to
/// windows, arg-max, gather (and the tangent gathered at the same index when given).
pub fn max_pool_time_gather(
    x: &Tensor,
    t: Option<&Tensor>,
    k: usize,
) -> Result<(Tensor, Option<Tensor>)> {
    check_pool(x, k)?;
    let dims = x.dims().to_vec();
    let len = dims[dims.len() - 1];
    let n = len / k;
    let axis = dims.len() - 1;
    let mut win = dims[..axis].to_vec();
    win.extend([n, k]);
    let windows = |v: &Tensor| -> Result<Tensor> {
        Ok(v.narrow(axis, 0, n * k)?
            .contiguous()?
            .reshape(win.clone())?)
    };
    let xw = windows(x)?;
    let idx = xw.argmax_keepdim(axis + 1)?;
    let y = xw.gather(&idx, axis + 1)?.squeeze(axis + 1)?;
    let ty = match t {
        Some(t) => Some(windows(t)?.gather(&idx, axis + 1)?.squeeze(axis + 1)?),
        None => None,
    };
    Ok((y, ty))
}

/// `(v, key) → v · [key > 0]` (CustomOp2); backward masks the gradient the same way into `v`
/// only (the mask is piecewise constant in `key`).
struct MaskPositive;

fn mask_positive<T: CpuElem>(v: &[T], key: &[T]) -> Vec<T> {
    let mut out = vec![T::ZERO; v.len()];
    par_rows(&mut out, 1, 2, |i0, chunk| {
        for ((o, &v), &k) in chunk.iter_mut().zip(&v[i0..]).zip(&key[i0..]) {
            *o = if k > T::ZERO { v } else { T::ZERO };
        }
    });
    out
}

impl CustomOp2 for MaskPositive {
    fn name(&self) -> &'static str {
        "invar-mask-positive"
    }
    fn cpu_fwd(
        &self,
        sv: &CpuStorage,
        lv: &Layout,
        sk: &CpuStorage,
        lk: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        if lv.shape() != lk.shape() {
            bail!("relu mask: {:?} vs key {:?}", lv.shape(), lk.shape());
        }
        float_dispatch!(sv.dtype(), self.name(), |T| {
            let v = slice::<T>(sv, lv, "relu input")?;
            let k = slice::<T>(sk, lk, "relu mask key")?;
            Ok((
                T::to_cpu_storage_owned(mask_positive(v, k)),
                lv.shape().clone(),
            ))
        })
    }
    fn bwd(
        &self,
        _v: &Tensor,
        key: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((
            Some(grad.contiguous()?.apply_op2_no_bwd(key, &MaskPositive)?),
            None,
        ))
    }
}

/// `relu(pre)` and, when given, the tangent `t · [pre > 0]` (ReLU's derivative is a constant
/// mask). On CPU (f32, f64) one masking pass each way, forward and backward; elsewhere candle's
/// `relu` and a comparison mask, with the same values and gradients.
pub fn relu_with_tangent(pre: &Tensor, t: Option<&Tensor>) -> Result<(Tensor, Option<Tensor>)> {
    if let Some(t) = t {
        if t.dims() != pre.dims() {
            return Err(Error::Shape {
                op: "relu_with_tangent (pre-activation and tangent)",
                left: pre.dims().to_vec(),
                right: t.dims().to_vec(),
            });
        }
    }
    if !has_cpu_kernel(pre) {
        let y = pre.relu()?;
        let t = match t {
            Some(t) => Some((t * pre.gt(0.0)?.to_dtype(pre.dtype())?)?),
            None => None,
        };
        return Ok((y, t));
    }
    let pre = pre.contiguous()?;
    let key = pre.detach();
    let y = pre.apply_op2(&key, MaskPositive)?;
    let t = match t {
        Some(t) => Some(t.contiguous()?.apply_op2(&key, MaskPositive)?),
        None => None,
    };
    Ok((y, t))
}

#[cfg(test)]
mod tests {
    //! Values against the defining sums, gradients against the composite path and central finite
    //! differences (f64: the ops are linear in each argument, so FD is exact up to rounding).
    use super::*;
    use candle_core::Var;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    type R<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

    fn rand_vec(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
        (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    fn tensor(rng: &mut ChaCha8Rng, dims: &[usize]) -> R<Tensor> {
        let n = dims.iter().product();
        Ok(Tensor::from_vec(rand_vec(rng, n), dims, &Device::Cpu)?)
    }

    /// Serialises the tests that set [`SPLIT_OVERRIDE`].
    static SPLIT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Runs `f` with the direct GEMMs, then with the split ones (where the taps allow).
    fn both_paths(f: impl Fn() -> R) -> R {
        let _guard = SPLIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        for split in [false, true] {
            SPLIT_OVERRIDE.store(1 + u8::from(split), std::sync::atomic::Ordering::Relaxed);
            let r = f();
            SPLIT_OVERRIDE.store(0, std::sync::atomic::Ordering::Relaxed);
            r.map_err(|e| format!("split {split}: {e}"))?;
        }
        Ok(())
    }

    /// y[b, f, t] = bias[f] + Σ_{c,k} w[f, c, k] · x[b, c, t + k], straight from the definition.
    fn conv_by_hand(x: &[f64], w: &[f64], bias: &[f64], d: ConvDims) -> Vec<f64> {
        let out = d.out();
        let mut y = vec![0.0; d.b * d.f * out];
        for b in 0..d.b {
            for f in 0..d.f {
                for t in 0..out {
                    let mut s = bias[f];
                    for c in 0..d.c {
                        for k in 0..d.k {
                            s += w[(f * d.c + c) * d.k + k] * x[(b * d.c + c) * d.t + t + k];
                        }
                    }
                    y[(b * d.f + f) * out + t] = s;
                }
            }
        }
        y
    }

    /// Odd sizes: K = 1, B = 1, T' = 1; B = 7 and 9 (one partial block; a full one and a partial
    /// one); K = 5 and 8 (the original network's widths; 4 and 8 take the split GEMMs) beside
    /// others; every block's GEMM rows run past its items' steps (rows rounded up to 16, 64 when
    /// split), so the zero padding is read.
    const SIZES: [ConvDims; 6] = [
        ConvDims {
            b: 1,
            c: 3,
            t: 10,
            f: 4,
            k: 1,
        },
        ConvDims {
            b: 2,
            c: 3,
            t: 10,
            f: 4,
            k: 3,
        },
        ConvDims {
            b: 3,
            c: 5,
            t: 7,
            f: 2,
            k: 7,
        },
        ConvDims {
            b: 7,
            c: 4,
            t: 13,
            f: 5,
            k: 4,
        },
        ConvDims {
            b: 9,
            c: 2,
            t: 11,
            f: 3,
            k: 5,
        },
        ConvDims {
            b: 2,
            c: 3,
            t: 12,
            f: 2,
            k: 8,
        },
    ];

    #[test]
    fn conv1d_value_equals_the_defining_sum() -> R {
        both_paths(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            for d in SIZES {
                let x = tensor(&mut rng, &[d.b, d.c, d.t])?;
                let w = tensor(&mut rng, &[d.f, d.c, d.k])?;
                let bias = tensor(&mut rng, &[d.f])?;
                let want = conv_by_hand(
                    &x.flatten_all()?.to_vec1()?,
                    &w.flatten_all()?.to_vec1()?,
                    &bias.to_vec1()?,
                    d,
                );
                let got = conv1d(&x, &w, Some(&bias))?
                    .flatten_all()?
                    .to_vec1::<f64>()?;
                let unfold = conv1d_unfold(&x, &w, Some(&bias))?
                    .flatten_all()?
                    .to_vec1::<f64>()?;
                assert_eq!(got.len(), want.len());
                for ((g, u), h) in got.iter().zip(&unfold).zip(&want) {
                    assert!(
                        (g - h).abs() < 1e-12 && (u - h).abs() < 1e-12,
                        "{d:?}: {g} {u} {h}"
                    );
                }
                let nobias = conv1d(&x, &w, None)?.flatten_all()?.to_vec1::<f64>()?;
                let bv = bias.to_vec1::<f64>()?;
                for (i, (g, n)) in got.iter().zip(&nobias).enumerate() {
                    let f = (i / d.out()) % d.f;
                    assert!((g - n - bv[f]).abs() < 1e-12);
                }
            }
            Ok(())
        })
    }

    /// The output y = conv(x, w, bias) and the gradients of L = Σ c ⊙ y for x, w and bias, in
    /// that order, as `T` (the tensors' element type).
    fn output_and_grads<T: candle_core::WithDType>(
        conv: &dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
        x: &Tensor,
        w: &Tensor,
        bias: &Tensor,
        c: &Tensor,
    ) -> R<[Vec<T>; 4]> {
        let (xv, wv, bv) = (
            Var::from_tensor(x)?,
            Var::from_tensor(w)?,
            Var::from_tensor(bias)?,
        );
        let y = conv(xv.as_tensor(), wv.as_tensor(), bv.as_tensor())?;
        let g = (&y * c)?.sum_all()?.backward()?;
        let get = |v: &Var| -> R<Vec<T>> {
            Ok(g.get(v.as_tensor())
                .ok_or("missing gradient")?
                .flatten_all()?
                .to_vec1()?)
        };
        Ok([y.flatten_all()?.to_vec1()?, get(&xv)?, get(&wv)?, get(&bv)?])
    }

    /// Gradients of L = Σ c ⊙ conv(x, w, bias) for x, w and bias.
    fn conv_grads(
        conv: &dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
        x: &Tensor,
        w: &Tensor,
        bias: &Tensor,
        c: &Tensor,
    ) -> R<[Vec<f64>; 3]> {
        let [_, dx, dw, db] = output_and_grads(conv, x, w, bias, c)?;
        Ok([dx, dw, db])
    }

    /// Central differences (h = 1e-5) of `loss` along every entry of x, w and bias against the
    /// analytic gradients `ours` (in that order).
    fn assert_central_differences(
        d: &ConvDims,
        args: [&Tensor; 3],
        ours: &[Vec<f64>; 3],
        loss: &dyn Fn(&Tensor, &Tensor, &Tensor) -> R<f64>,
    ) -> R {
        let h = 1e-5;
        for (which, arg) in args.iter().enumerate() {
            let base = arg.flatten_all()?.to_vec1::<f64>()?;
            for i in 0..base.len() {
                let mut l = [0.0; 2];
                for (s, step) in [h, -h].into_iter().enumerate() {
                    let mut m = base.clone();
                    m[i] += step;
                    let mut a = args.map(Tensor::clone);
                    a[which] = Tensor::from_vec(m, arg.dims(), &Device::Cpu)?;
                    l[s] = loss(&a[0], &a[1], &a[2])?;
                }
                let fd = (l[0] - l[1]) / (2.0 * h);
                let g = ours[which][i];
                assert!(
                    (fd - g).abs() < 1e-7 * (1.0 + g.abs()),
                    "{d:?} arg {which}[{i}]: {g} vs FD {fd}"
                );
            }
        }
        Ok(())
    }

    #[test]
    fn split_gemms_at_every_level_equal_the_defining_sums() -> R {
        // fwd_split and grad_split on one signal, 0 to 3 levels of the split (8 taps, 32 steps):
        // y[n, f] = Σ_{c,k} x[c, n + k] · w[f, c, k] and dW[c, k, f] = Σ_n a[n, f] · x[c, n + k],
        // to f64 rounding (the split's coefficients are ±1).
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let d = ConvDims {
            b: 1,
            c: 3,
            t: 39,
            f: 5,
            k: 8,
        };
        let (m, lx) = (32, 41);
        let x = rand_vec(&mut rng, d.c * lx);
        let w = rand_vec(&mut rng, d.f * d.c * d.k);
        let a = rand_vec(&mut rng, m * d.f);
        for levels in 0..=3 {
            let leaves = weight_leaves(&w, d, levels);
            let mut scratch =
                vec![0.0; fwd_scratch(d, d.k, m, levels) + grad_scratch(d, d.k, m, levels)];
            let mut y = vec![0.0; m * d.f];
            fwd_split(
                (&x, lx),
                d,
                (d.k, m, levels),
                &leaves,
                &mut y,
                m,
                false,
                &mut scratch,
            )?;
            let mut dw = vec![0.0; d.c * d.k * d.f];
            grad_split((&x, lx), d, (d.k, m, levels), &a, &mut dw, &mut scratch)?;
            for n in 0..m {
                for f in 0..d.f {
                    let mut want = 0.0;
                    for c in 0..d.c {
                        for k in 0..d.k {
                            want += x[c * lx + n + k] * w[f * d.c * d.k + c * d.k + k];
                        }
                    }
                    let got = y[f * m + split_position(n, m, levels)];
                    assert!(
                        (got - want).abs() < 1e-12,
                        "levels {levels} y[{n}, {f}]: {got} vs {want}"
                    );
                }
            }
            for c in 0..d.c {
                for k in 0..d.k {
                    for f in 0..d.f {
                        let want: f64 = (0..m).map(|n| a[n * d.f + f] * x[c * lx + n + k]).sum();
                        let got = dw[c * d.k * d.f + k * d.f + f];
                        assert!(
                            (got - want).abs() < 1e-12,
                            "levels {levels} dW[{c}, {k}, {f}]: {got} vs {want}"
                        );
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn conv1d_gradients_match_the_unfold_path_and_finite_differences() -> R {
        both_paths(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(2);
            for d in SIZES {
                let x = tensor(&mut rng, &[d.b, d.c, d.t])?;
                let w = tensor(&mut rng, &[d.f, d.c, d.k])?;
                let bias = tensor(&mut rng, &[d.f])?;
                let c = tensor(&mut rng, &[d.b, d.f, d.out()])?;
                let ours = conv_grads(&|x, w, b| conv1d(x, w, Some(b)), &x, &w, &bias, &c)?;
                let unfold =
                    conv_grads(&|x, w, b| conv1d_unfold(x, w, Some(b)), &x, &w, &bias, &c)?;
                for (o, u) in ours.iter().zip(&unfold) {
                    assert_eq!(o.len(), u.len());
                    for (a, b) in o.iter().zip(u) {
                        assert!((a - b).abs() < 1e-10, "{d:?}: {a} vs {b}");
                    }
                }
                // central differences of L along every entry of x, w and bias
                let loss = |x: &Tensor, w: &Tensor, b: &Tensor| -> R<f64> {
                    Ok((conv1d(x, w, Some(b))? * &c)?
                        .sum_all()?
                        .to_scalar::<f64>()?)
                };
                assert_central_differences(&d, [&x, &w, &bias], &ours, &loss)?;
            }
            Ok(())
        })
    }

    #[test]
    fn conv1d_f32_matches_the_unfold_path_at_the_original_layer_shape() -> R {
        both_paths(|| {
            // conv1 of the 001 network on a smaller batch: 129 channels, 8 taps, 100 frames.
            let mut rng = ChaCha8Rng::seed_from_u64(3);
            let d = ConvDims {
                b: 3,
                c: 129,
                t: 100,
                f: 32,
                k: 8,
            };
            let f32t = |dims: &[usize], rng: &mut ChaCha8Rng| -> R<Tensor> {
                Ok(tensor(rng, dims)?.to_dtype(DType::F32)?)
            };
            let x = f32t(&[d.b, d.c, d.t], &mut rng)?;
            let w = f32t(&[d.f, d.c, d.k], &mut rng)?;
            let bias = f32t(&[d.f], &mut rng)?;
            let c = f32t(&[d.b, d.f, d.out()], &mut rng)?;
            let grads = |conv: &dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>| {
                output_and_grads::<f32>(conv, &x, &w, &bias, &c)
            };
            let ours = grads(&|x, w, b| conv1d(x, w, Some(b)))?;
            let unfold = grads(&|x, w, b| conv1d_unfold(x, w, Some(b)))?;
            // Sums of up to 1032 (value, dX: 256) products of O(1) terms in f32: rounding differs by
            // the summation order, |error| ≲ n·ε·max|term| ≈ 1032 · 6e-8 ≈ 6e-5; 1e-3 leaves margin.
            for (name, (o, u)) in ["y", "dx", "dw", "db"].iter().zip(ours.iter().zip(&unfold)) {
                for (a, b) in o.iter().zip(u) {
                    assert!((a - b).abs() < 1e-3 * (1.0 + b.abs()), "{name}: {a} vs {b}");
                }
            }
            Ok(())
        })
    }

    #[test]
    fn conv1d_with_self_tangent_equals_two_calls_and_matches_finite_differences() -> R {
        both_paths(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            for d in SIZES {
                let x = tensor(&mut rng, &[d.b, d.c, d.t])?;
                let w = tensor(&mut rng, &[d.f, d.c, d.k])?;
                let bias = tensor(&mut rng, &[d.f])?;
                let c1 = tensor(&mut rng, &[d.b, d.f, d.out()])?;
                let c2 = tensor(&mut rng, &[d.b, d.f, d.out()])?;
                // Values: the same bits as the two separate calls.
                let (y, t) = conv1d_with_self_tangent(&x, &w, &bias)?;
                let y2 = conv1d(&x, &w, Some(&bias))?;
                let t2 = conv1d(&x, &w, None)?;
                assert_eq!(
                    y.flatten_all()?.to_vec1::<f64>()?,
                    y2.flatten_all()?.to_vec1::<f64>()?
                );
                assert_eq!(
                    t.flatten_all()?.to_vec1::<f64>()?,
                    t2.flatten_all()?.to_vec1::<f64>()?
                );
                // Gradients of L = Σ c1 ⊙ y + Σ c2 ⊙ t: the fused path, the two calls, and the
                // composite path agree; central differences check the fused one.
                let paired = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> {
                    let (y, t) = conv1d_with_self_tangent(x, w, b)?;
                    Ok(((y * &c1)? + (t * &c2)?)?)
                };
                let separate = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> {
                    Ok(((conv1d(x, w, Some(b))? * &c1)? + (conv1d(x, w, None)? * &c2)?)?)
                };
                let composite = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> {
                    let t = conv1d_unfold(x, w, None)?;
                    let y = conv1d_unfold(x, w, Some(b))?;
                    Ok(((y * &c1)? + (t * &c2)?)?)
                };
                let ones = Tensor::ones((d.b, d.f, d.out()), DType::F64, &Device::Cpu)?;
                let ours = conv_grads(&paired, &x, &w, &bias, &ones)?;
                for other in [
                    conv_grads(&separate, &x, &w, &bias, &ones)?,
                    conv_grads(&composite, &x, &w, &bias, &ones)?,
                ] {
                    for (o, u) in ours.iter().zip(&other) {
                        assert_eq!(o.len(), u.len());
                        for (a, b) in o.iter().zip(u) {
                            assert!((a - b).abs() < 1e-10, "{d:?}: {a} vs {b}");
                        }
                    }
                }
                let loss = |x: &Tensor, w: &Tensor, b: &Tensor| -> R<f64> {
                    Ok(paired(x, w, b)?.sum_all()?.to_scalar::<f64>()?)
                };
                assert_central_differences(&d, [&x, &w, &bias], &ours, &loss)?;
            }
            Ok(())
        })
    }

    #[test]
    fn conv1d_kernel_gradient_is_the_same_bytes_at_any_thread_count() -> R {
        both_paths(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(4);
            let d = ConvDims {
                b: 11,
                c: 6,
                t: 20,
                f: 3,
                k: 8,
            };
            let x = tensor(&mut rng, &[d.b, d.c, d.t])?.to_dtype(DType::F32)?;
            let w = tensor(&mut rng, &[d.f, d.c, d.k])?.to_dtype(DType::F32)?;
            let c = tensor(&mut rng, &[d.b, d.f, d.out()])?.to_dtype(DType::F32)?;
            let run = |threads: usize| -> R<Vec<f32>> {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()?;
                pool.install(|| -> R<Vec<f32>> {
                    let wv = Var::from_tensor(&w)?;
                    let g = (conv1d(&x, wv.as_tensor(), None)? * &c)?
                        .sum_all()?
                        .backward()?;
                    Ok(g.get(wv.as_tensor())
                        .ok_or("no dw")?
                        .flatten_all()?
                        .to_vec1()?)
                })
            };
            let one = run(1)?;
            for threads in [2, 3] {
                assert_eq!(one, run(threads)?, "{threads} threads");
            }
            Ok(())
        })
    }

    #[test]
    fn layer_stack_above_the_parallel_threshold_matches_the_composite_path_at_any_thread_count() -> R
    {
        both_paths(|| {
            // conv1d + bias → ReLU → max-pool, large enough that every row-wise loop (pool gather
            // and scatter, ReLU masks, bias sum, dW's block sum) takes `par_rows`' rayon path:
            // 20 · 32 · 93 = 59 520 elements ≥ 2 · PAR_WORK, dW 32 · 32 · 8 entries over 3 blocks.
            let d = ConvDims {
                b: 20,
                c: 32,
                t: 100,
                f: 32,
                k: 8,
            };
            assert!(d.b * d.f * d.out() >= 2 * PAR_WORK && d.f * d.c * d.k * 5 >= 2 * PAR_WORK);
            let mut rng = ChaCha8Rng::seed_from_u64(9);
            let x = tensor(&mut rng, &[d.b, d.c, d.t])?;
            let w = tensor(&mut rng, &[d.f, d.c, d.k])?;
            let bias = tensor(&mut rng, &[d.f])?;
            let c = tensor(&mut rng, &[d.b, d.f, d.out() / 4])?;
            type Stack = dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor> + Sync;
            let run = |stack: &Stack, threads: usize| -> R<[Vec<f64>; 4]> {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()?;
                pool.install(|| output_and_grads::<f64>(stack, &x, &w, &bias, &c))
            };
            let ops = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> {
                let (h, _) = relu_with_tangent(&conv1d(x, w, Some(b))?, None)?;
                max_pool_time(&h, 4)
            };
            let composite = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> {
                let h = conv1d_unfold(x, w, Some(b))?.relu()?;
                Ok(max_pool_time_gather(&h, None, 4)?.0)
            };
            let one = run(&ops, 1)?;
            assert_eq!(one, run(&ops, 3)?, "1 vs 3 threads");
            let want = run(&composite, 1)?;
            for (name, (o, u)) in ["y", "dx", "dw", "db"].iter().zip(one.iter().zip(&want)) {
                assert_eq!(o.len(), u.len(), "{name}");
                for (a, b) in o.iter().zip(u) {
                    // f64 sums of ≤ 32 · 8 · 20 · 93 products of O(1) terms in different orders
                    assert!((a - b).abs() < 1e-9 * (1.0 + b.abs()), "{name}: {a} vs {b}");
                }
            }
            Ok(())
        })
    }

    #[test]
    fn conv1d_rejects_shapes_that_do_not_fit() -> R {
        let dev = Device::Cpu;
        let x = Tensor::zeros((2, 3, 5), DType::F32, &dev)?;
        for w in [(4, 2, 3), (4, 3, 6), (4, 3, 0), (0, 3, 2)] {
            let w = Tensor::zeros(w, DType::F32, &dev)?;
            assert!(matches!(conv1d(&x, &w, None), Err(Error::Shape { .. })));
        }
        let w = Tensor::zeros((4, 3, 2), DType::F32, &dev)?;
        let bias = Tensor::zeros(3, DType::F32, &dev)?;
        assert!(matches!(
            conv1d(&x, &w, Some(&bias)),
            Err(Error::Shape { .. })
        ));
        let empty = Tensor::zeros((2, 0, 5), DType::F32, &dev)?;
        let w0 = Tensor::zeros((4, 0, 2), DType::F32, &dev)?;
        assert!(matches!(
            conv1d(&empty, &w0, None),
            Err(Error::Shape { .. })
        ));
        // an empty batch is no error: an empty output
        let none = Tensor::zeros((0, 3, 5), DType::F32, &dev)?;
        assert_eq!(conv1d(&none, &w, None)?.dims(), [0, 4, 4]);
        Ok(())
    }

    #[test]
    fn max_pool_value_by_hand_and_the_tail_is_cropped() -> R {
        // windows of 3 over 8 steps: [1, 5, 2] [7, 7, 0] (the tail [9, 4] is cropped)
        let x = Tensor::new(&[[[1f64, 5., 2., 7., 7., 0., 9., 4.]]], &Device::Cpu)?;
        let t = Tensor::new(
            &[[[10f64, 11., 12., 13., 14., 15., 16., 17.]]],
            &Device::Cpu,
        )?;
        assert_eq!(
            max_pool_time(&x, 3)?.to_vec3::<f64>()?,
            vec![vec![vec![5., 7.]]]
        );
        let (y, ty) = max_pool_time_with_tangent(&x, &t, 3)?;
        assert_eq!(y.to_vec3::<f64>()?, vec![vec![vec![5., 7.]]]);
        // tie in the second window: the first maximal entry (index 3) is chosen
        assert_eq!(ty.to_vec3::<f64>()?, vec![vec![vec![11., 13.]]]);
        let (gy, gt) = max_pool_time_gather(&x, Some(&t), 3)?;
        assert_eq!(gy.to_vec3::<f64>()?, y.to_vec3::<f64>()?);
        assert_eq!(
            gt.ok_or("no tangent")?.to_vec3::<f64>()?,
            ty.to_vec3::<f64>()?
        );
        let xv = Var::from_tensor(&x)?;
        let g = (max_pool_time(xv.as_tensor(), 3)? * Tensor::new(&[[[2f64, 3.]]], &Device::Cpu)?)?
            .sum_all()?
            .backward()?;
        let dx = g.get(xv.as_tensor()).ok_or("no dx")?.to_vec3::<f64>()?;
        assert_eq!(dx, vec![vec![vec![0., 2., 0., 3., 0., 0., 0., 0.]]]);
        Ok(())
    }

    #[test]
    fn max_pool_gradient_goes_to_exactly_one_entry_per_window_and_matches_fd() -> R {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        for (dims, k) in [
            (vec![2, 3, 17], 4),
            (vec![1, 1, 5], 1),
            (vec![3, 2, 9], 9),
            (vec![4, 10], 3),
        ] {
            let x = tensor(&mut rng, &dims)?;
            let len = dims[dims.len() - 1];
            let mut out = dims.clone();
            *out.last_mut().ok_or("no dims")? = len / k;
            let c = tensor(&mut rng, &out)?;
            let xv = Var::from_tensor(&x)?;
            let y = max_pool_time(xv.as_tensor(), k)?;
            let g = (&y * &c)?.sum_all()?.backward()?;
            let dx = g
                .get(xv.as_tensor())
                .ok_or("no dx")?
                .flatten_all()?
                .to_vec1::<f64>()?;
            let cv = c.flatten_all()?.to_vec1::<f64>()?;
            let xs = x.flatten_all()?.to_vec1::<f64>()?;
            let n = len / k;
            for (r, (dr, xr)) in dx.chunks(len).zip(xs.chunks(len)).enumerate() {
                for j in 0..n {
                    let win = &dr[j * k..(j + 1) * k];
                    assert_eq!(
                        win.iter().filter(|v| **v != 0.0).count(),
                        1,
                        "one entry per window"
                    );
                    let at = (0..k)
                        .max_by(|&a, &b| xr[j * k + a].total_cmp(&xr[j * k + b]))
                        .ok_or("empty")?;
                    assert_eq!(win[at], cv[r * n + j]);
                }
                assert!(
                    dr[n * k..].iter().all(|v| *v == 0.0),
                    "cropped tail gets no gradient"
                );
            }
            // FD: random distinct values, so a step of 1e-6 never changes an arg-max
            let h = 1e-6;
            for i in 0..xs.len() {
                let mut l = [0.0; 2];
                for (s, sign) in [1.0, -1.0].into_iter().enumerate() {
                    let mut m = xs.clone();
                    m[i] += sign * h;
                    let m = Tensor::from_vec(m, dims.as_slice(), &Device::Cpu)?;
                    l[s] = (max_pool_time(&m, k)? * &c)?
                        .sum_all()?
                        .to_scalar::<f64>()?;
                }
                let fd = (l[0] - l[1]) / (2.0 * h);
                assert!((fd - dx[i]).abs() < 1e-8, "[{i}] {} vs FD {fd}", dx[i]);
            }
            // the composite path gives the same gradient
            let xv2 = Var::from_tensor(&x)?;
            let (y2, _) = max_pool_time_gather(xv2.as_tensor(), None, k)?;
            let g2 = (&y2 * &c)?.sum_all()?.backward()?;
            let dx2 = g2
                .get(xv2.as_tensor())
                .ok_or("no dx")?
                .flatten_all()?
                .to_vec1::<f64>()?;
            assert_eq!(dx, dx2);
        }
        Ok(())
    }

    #[test]
    fn pooled_tangent_gradient_scatters_into_the_tangent_only() -> R {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let x = Var::from_tensor(&tensor(&mut rng, &[2, 3, 10])?)?;
        let t = Var::from_tensor(&tensor(&mut rng, &[2, 3, 10])?)?;
        let c = tensor(&mut rng, &[2, 3, 2])?;
        let (_, ty) = max_pool_time_with_tangent(x.as_tensor(), t.as_tensor(), 4)?;
        let g = (&ty * &c)?.sum_all()?.backward()?;
        assert!(
            g.get(x.as_tensor()).is_none(),
            "x gets no gradient through the tangent"
        );
        let dt = g.get(t.as_tensor()).ok_or("no dt")?;
        let xv = Var::from_tensor(x.as_tensor())?;
        let gw = (max_pool_time(xv.as_tensor(), 4)? * &c)?
            .sum_all()?
            .backward()?;
        let dx = gw.get(xv.as_tensor()).ok_or("no dx")?;
        assert_eq!(
            dt.flatten_all()?.to_vec1::<f64>()?,
            dx.flatten_all()?.to_vec1::<f64>()?
        );
        // and the composite path agrees
        let (_, ty2) = max_pool_time_gather(x.as_tensor(), Some(t.as_tensor()), 4)?;
        let g2 = (ty2.ok_or("no tangent")? * &c)?.sum_all()?.backward()?;
        let dt2 = g2.get(t.as_tensor()).ok_or("no dt")?;
        assert_eq!(
            dt.flatten_all()?.to_vec1::<f64>()?,
            dt2.flatten_all()?.to_vec1::<f64>()?
        );
        Ok(())
    }

    #[test]
    fn max_pool_rejects_bad_widths() -> R {
        let x = Tensor::zeros((2, 3, 5), DType::F32, &Device::Cpu)?;
        assert!(matches!(max_pool_time(&x, 0), Err(Error::Shape { .. })));
        assert!(matches!(max_pool_time(&x, 6), Err(Error::Shape { .. })));
        let t = Tensor::zeros((2, 3, 4), DType::F32, &Device::Cpu)?;
        assert!(matches!(
            max_pool_time_with_tangent(&x, &t, 2),
            Err(Error::Shape { .. })
        ));
        Ok(())
    }

    #[test]
    fn relu_with_tangent_matches_candles_relu_and_mask() -> R {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let pre = Var::from_tensor(&tensor(&mut rng, &[3, 4, 7])?)?;
        let t = Var::from_tensor(&tensor(&mut rng, &[3, 4, 7])?)?;
        let (cy, ct) = (tensor(&mut rng, &[3, 4, 7])?, tensor(&mut rng, &[3, 4, 7])?);
        let (y, ty) = relu_with_tangent(pre.as_tensor(), Some(t.as_tensor()))?;
        let ty = ty.ok_or("no tangent")?;
        let y2 = pre.as_tensor().relu()?;
        let mask = pre.as_tensor().gt(0.0)?.to_dtype(DType::F64)?;
        let ty2 = (t.as_tensor() * &mask)?;
        let flat = |v: &Tensor| -> R<Vec<f64>> { Ok(v.flatten_all()?.to_vec1()?) };
        assert_eq!(flat(&y)?, flat(&y2)?);
        assert_eq!(flat(&ty)?, flat(&ty2)?);
        let g = ((y * &cy)?.sum_all()? + (ty * &ct)?.sum_all()?)?.backward()?;
        let g2 = ((y2 * &cy)?.sum_all()? + (ty2 * &ct)?.sum_all()?)?.backward()?;
        for v in [&pre, &t] {
            let a = g.get(v.as_tensor()).ok_or("no grad")?;
            let b = g2.get(v.as_tensor()).ok_or("no grad")?;
            assert_eq!(flat(a)?, flat(b)?);
        }
        // by hand: d relu(x)/dx is 1 above 0 and 0 at or below it
        let x = Var::from_tensor(&Tensor::new(&[-1f64, 0., 2.], &Device::Cpu)?)?;
        let (r, _) = relu_with_tangent(x.as_tensor(), None)?;
        assert_eq!(r.to_vec1::<f64>()?, vec![0., 0., 2.]);
        let g = r.sum_all()?.backward()?;
        assert_eq!(
            g.get(x.as_tensor()).ok_or("no dx")?.to_vec1::<f64>()?,
            vec![0., 0., 1.]
        );
        Ok(())
    }
}
