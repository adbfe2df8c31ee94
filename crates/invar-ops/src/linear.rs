//! Dense layers as candle custom ops: `act(x·W + b)` with `W` stored `[in, out]` or used transposed
//! from `[out, in]` storage, on the CPU through the `gemm` crate with strides (no transposed copy),
//! the bias and activation fused into the product's output, and a backward pass that computes only
//! the gradients its inputs track. [`GradSink`] lets a big weight's gradient be accumulated in one
//! reused buffer instead of candle's fresh `zeros + add` allocation every step.
//!
//! On other devices (CUDA) and dtypes [`linear`] runs [`linear_composite`], candle's own ops, which
//! compute the same value and gradients (the tests check both paths against each other and
//! against central finite differences).

use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::backprop::GradStore;
use candle_core::{
    CpuStorage, CustomOp2, CustomOp3, DType, InplaceOp1, Layout, Shape, Storage, Tensor,
};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::elem::CpuElem;
use crate::gemm::Operand;
use crate::{Error, Result};

/// The element-wise non-linearity applied to `x·W + b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// No non-linearity.
    #[default]
    Identity,
    Tanh,
    /// `max(x, 0)`; its gradient at exactly 0 is 0 (PyTorch's convention; candle's own `relu`
    /// takes 1 there).
    Relu,
    Sigmoid,
    /// `x` for `x > 0`, `exp(x) − 1` otherwise (α = 1, candle's `elu(1.0)`).
    Elu,
}

/// How the weight tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// `W` is `[in, out]`: `y = x·W + b`.
    InOut,
    /// `W` is `[out, in]` (candle's `Linear`, or a tied decoder reusing its mirror's `[in, out]`
    /// encoder weight): `y = x·Wᵀ + b`, with no transposed copy.
    OutIn,
}

/// Elements per rayon task in element-wise passes.
const CHUNK: usize = 1 << 14;
/// Products with fewer multiply-adds than this run on one thread.
const PARALLEL_MIN_FLOPS: usize = 1 << 18;

fn msg(s: String) -> candle_core::Error {
    candle_core::Error::Msg(s)
}

/// The elements of a CPU storage of type `T`, or an error naming `what` and both dtypes.
fn slice_of<'a, T: CpuElem>(s: &'a CpuStorage, what: &str) -> candle_core::Result<&'a [T]> {
    T::slice(s).ok_or_else(|| {
        msg(format!(
            "{what} is {:?}, expected {:?} like the other operands",
            s.dtype(),
            T::DTYPE
        ))
    })
}

/// A strided 2-D view into a storage slice, bounds-checked on construction.
#[derive(Clone, Copy)]
struct View<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a, T> View<'a, T> {
    fn new(data: &'a [T], layout: &Layout, what: &str) -> candle_core::Result<Self> {
        let (dims, strides) = (layout.dims(), layout.stride());
        if dims.len() != 2 {
            return Err(msg(format!(
                "{what}: expected a matrix, got shape {dims:?}"
            )));
        }
        let data = data
            .get(layout.start_offset()..)
            .ok_or_else(|| msg(format!("{what}: offset past the storage")))?;
        let v = Self {
            data,
            rows: dims[0],
            cols: dims[1],
            rs: strides[0],
            cs: strides[1],
        };
        if v.rows > 0 && v.cols > 0 && (v.rows - 1) * v.rs + (v.cols - 1) * v.cs >= data.len() {
            return Err(msg(format!("{what}: strides reach past the storage")));
        }
        Ok(v)
    }

    /// The same matrix as a `gemm` operand.
    fn operand(self) -> Operand<'a, T> {
        Operand {
            data: self.data,
            rs: self.rs,
            cs: self.cs,
        }
    }

    /// The transposed view (no copy).
    fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// `dst (m×n, row-major contiguous) = a·b`, or `dst += a·b` when `accumulate`; `gemm`'s own
/// rayon split for products of at least `PARALLEL_MIN_FLOPS`.
fn gemm_into<T: CpuElem>(
    dst: &mut [T],
    a: View<'_, T>,
    b: View<'_, T>,
    accumulate: bool,
) -> candle_core::Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k || dst.len() < m * n {
        return Err(msg(format!(
            "linear gemm: {m}×{k} · {}×{n} into {} elements",
            b.rows,
            dst.len()
        )));
    }
    Ok(crate::gemm::gemm(
        (m, n, k),
        a.operand(),
        b.operand(),
        dst,
        (n, 1),
        accumulate,
        m * n * k >= PARALLEL_MIN_FLOPS,
    )?)
}

impl Activation {
    fn apply<T: CpuElem>(self, v: T) -> T {
        match self {
            Activation::Identity => v,
            Activation::Tanh => v.tanh(),
            Activation::Relu => {
                if v > T::ZERO {
                    v
                } else {
                    T::ZERO
                }
            }
            Activation::Sigmoid => T::ONE / (T::ONE + (T::ZERO - v).exp()),
            Activation::Elu => {
                if v > T::ZERO {
                    v
                } else {
                    v.exp() - T::ONE
                }
            }
        }
    }

    /// The derivative written in terms of the output `y = act(v)`.
    fn slope<T: CpuElem>(self, y: T) -> T {
        match self {
            Activation::Identity => T::ONE,
            Activation::Tanh => T::ONE - y * y,
            Activation::Relu => {
                if y > T::ZERO {
                    T::ONE
                } else {
                    T::ZERO
                }
            }
            Activation::Sigmoid => y * (T::ONE - y),
            Activation::Elu => {
                if y > T::ZERO {
                    T::ONE
                } else {
                    y + T::ONE
                }
            }
        }
    }

    /// The same function from candle's own ops (the composite path).
    fn composite(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Activation::Identity => Ok(x.clone()),
            Activation::Tanh => x.tanh(),
            Activation::Relu => x.relu(),
            Activation::Sigmoid => (x.neg()?.exp()? + 1.0)?.recip(),
            Activation::Elu => x.elu(1.0),
        }
    }
}

/// The forward op: `act(x·W (+ b))`; with a sink, `W`'s gradient goes there instead of candle's
/// gradient store.
#[derive(Clone)]
struct LinearOp {
    layout: WeightLayout,
    act: Activation,
    sink: Option<GradSink>,
}

impl LinearOp {
    fn forward<T: CpuElem>(
        &self,
        x: (&[T], &Layout),
        w: (&[T], &Layout),
        b: Option<(&[T], &Layout)>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let xv = View::new(x.0, x.1, "linear input")?;
        let wv = View::new(w.0, w.1, "linear weight")?;
        let wv = match self.layout {
            WeightLayout::InOut => wv,
            WeightLayout::OutIn => wv.t(),
        };
        if wv.rows != xv.cols {
            return Err(msg(format!(
                "linear: input width {} does not match the weight's input width {} (weight {:?}, {:?})",
                xv.cols,
                wv.rows,
                w.1.dims(),
                self.layout
            )));
        }
        let (rows, out) = (xv.rows, wv.cols);
        let mut dst = vec![T::ZERO; rows * out];
        if let Some((bs, bl)) = b {
            let bias = bl
                .contiguous_offsets()
                .and_then(|(s, e)| bs.get(s..e))
                .filter(|s| s.len() == out && bl.dims().len() == 1)
                .ok_or_else(|| {
                    msg(format!(
                        "linear: bias must be a contiguous [{out}] vector, got {:?}",
                        bl.dims()
                    ))
                })?;
            if out > 0 {
                for row in dst.chunks_exact_mut(out) {
                    row.copy_from_slice(bias);
                }
            }
        }
        gemm_into(&mut dst, xv, wv, b.is_some())?;
        if self.act != Activation::Identity {
            let act = self.act;
            dst.par_chunks_mut(CHUNK)
                .for_each(|c| c.iter_mut().for_each(|v| *v = act.apply(*v)));
        }
        Ok((T::storage(dst), Shape::from((rows, out))))
    }

    fn cpu<T: CpuElem>(
        &self,
        x: (&CpuStorage, &Layout),
        w: (&CpuStorage, &Layout),
        b: Option<(&CpuStorage, &Layout)>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let xs = slice_of::<T>(x.0, "linear input")?;
        let ws = slice_of::<T>(w.0, "linear weight")?;
        let bs = match b {
            Some((s, l)) => Some((slice_of::<T>(s, "linear bias")?, l)),
            None => None,
        };
        self.forward((xs, x.1), (ws, w.1), bs)
    }

    fn dispatch(
        &self,
        x: (&CpuStorage, &Layout),
        w: (&CpuStorage, &Layout),
        b: Option<(&CpuStorage, &Layout)>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        match x.0 {
            CpuStorage::F32(_) => self.cpu::<f32>(x, w, b),
            CpuStorage::F64(_) => self.cpu::<f64>(x, w, b),
            other => Err(msg(format!(
                "linear: the CPU op takes f32 or f64, got {:?}",
                other.dtype()
            ))),
        }
    }

    /// Gradients of `x`, `W` and `b` for those that track one.
    fn backward(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // [B, out]: the gradient before the activation.
        let g = if self.act == Activation::Identity {
            grad.clone()
        } else {
            res.apply_op2_no_bwd(&grad.contiguous()?, &ActGrad(self.act))?
        };
        let dx = if x.track_op() {
            // [B, out] · (W as [in, out])ᵀ
            let wt = match self.layout {
                WeightLayout::InOut => w.detach().t()?,
                WeightLayout::OutIn => w.detach(),
            };
            Some(g.apply_op2_no_bwd(&wt, &MatMul)?)
        } else {
            None
        };
        let dw = if !w.track_op() {
            None
        } else if let Some(sink) = &self.sink {
            sink.accumulate(x, &g, w, self.layout)?;
            None
        } else {
            Some(match self.layout {
                // [in, B] · [B, out]
                WeightLayout::InOut => x.detach().t()?.apply_op2_no_bwd(&g, &MatMul)?,
                // [out, B] · [B, in]
                WeightLayout::OutIn => g.t()?.apply_op2_no_bwd(&x.detach(), &MatMul)?,
            })
        };
        let db = match b {
            Some(b) if b.track_op() => Some(g.sum(0)?),
            _ => None,
        };
        Ok((dx, dw, db))
    }
}

impl CustomOp3 for LinearOp {
    fn name(&self) -> &'static str {
        "invar-linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.dispatch((s1, l1), (s2, l2), Some((s3, l3)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        self.backward(x, w, Some(b), res, grad)
    }
}

impl CustomOp2 for LinearOp {
    fn name(&self) -> &'static str {
        "invar-linear-nobias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.dispatch((s1, l1), (s2, l2), None)
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = self.backward(x, w, None, res, grad)?;
        Ok((dx, dw))
    }
}

/// `a·b` for two strided CPU matrices (used inside backward passes only).
struct MatMul;

impl MatMul {
    fn run<T: CpuElem>(
        a: (&CpuStorage, &Layout),
        b: (&CpuStorage, &Layout),
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let av = View::new(slice_of::<T>(a.0, "matmul lhs")?, a.1, "matmul lhs")?;
        let bv = View::new(slice_of::<T>(b.0, "matmul rhs")?, b.1, "matmul rhs")?;
        if av.cols != bv.rows {
            return Err(msg(format!("matmul: {:?} · {:?}", a.1.dims(), b.1.dims())));
        }
        let mut dst = vec![T::ZERO; av.rows * bv.cols];
        gemm_into(&mut dst, av, bv, false)?;
        Ok((T::storage(dst), Shape::from((av.rows, bv.cols))))
    }
}

impl CustomOp2 for MatMul {
    fn name(&self) -> &'static str {
        "invar-strided-matmul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        match s1 {
            CpuStorage::F32(_) => Self::run::<f32>((s1, l1), (s2, l2)),
            CpuStorage::F64(_) => Self::run::<f64>((s1, l1), (s2, l2)),
            other => Err(msg(format!("matmul: f32 or f64, got {:?}", other.dtype()))),
        }
    }
}

/// The contiguous elements a layout covers.
fn contiguous<'a, T: CpuElem>(
    s: &'a CpuStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<&'a [T]> {
    let v = slice_of::<T>(s, what)?;
    l.contiguous_offsets()
        .and_then(|(a, b)| v.get(a..b))
        .ok_or_else(|| msg(format!("{what} must be contiguous")))
}

/// `grad ⊙ act'(y)` from the activation's output `y` (arg 1) and the incoming gradient (arg 2).
struct ActGrad(Activation);

impl ActGrad {
    fn run<T: CpuElem>(
        &self,
        y: (&CpuStorage, &Layout),
        g: (&CpuStorage, &Layout),
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let ys = contiguous::<T>(y.0, y.1, "activation output")?;
        let gs = contiguous::<T>(g.0, g.1, "activation gradient")?;
        if y.1.dims() != g.1.dims() {
            return Err(msg(format!(
                "activation gradient: {:?} vs {:?}",
                y.1.dims(),
                g.1.dims()
            )));
        }
        let act = self.0;
        let mut out = vec![T::ZERO; ys.len()];
        out.par_chunks_mut(CHUNK)
            .zip(ys.par_chunks(CHUNK))
            .zip(gs.par_chunks(CHUNK))
            .for_each(|((o, y), g)| {
                for ((o, &y), &g) in o.iter_mut().zip(y).zip(g) {
                    *o = g * act.slope(y);
                }
            });
        Ok((T::storage(out), y.1.shape().clone()))
    }
}

impl CustomOp2 for ActGrad {
    fn name(&self) -> &'static str {
        "invar-activation-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (y, g) = ((s1, l1), (s2, l2));
        match s1 {
            CpuStorage::F32(_) => self.run::<f32>(y, g),
            CpuStorage::F64(_) => self.run::<f64>(y, g),
            other => Err(msg(format!(
                "activation gradient: f32 or f64, got {:?}",
                other.dtype()
            ))),
        }
    }
}

/// Where a weight's gradient is accumulated in place, in one buffer reused from step to step,
/// instead of candle's gradient store (which allocates `zeros` and a fresh sum for every weight on
/// every backward pass: for a 9216 × 5000 weight that is two 184 MB allocations whose page faults
/// cost more than the product itself).
///
/// Use: build the layer with [`linear_with_sink`], run `loss.backward()`, then call
/// [`GradSink::flush`] to put the gradient into the store before the optimiser reads it. Until the
/// next backward pass the store's tensor *is* the sink's buffer: the next backward pass overwrites
/// it, so do not keep a gradient store across steps. Cloning a sink shares its buffer.
#[derive(Clone, Default)]
pub struct GradSink {
    state: Arc<Mutex<SinkState>>,
}

#[derive(Default)]
struct SinkState {
    buf: Option<Tensor>,
    /// The buffer holds a gradient of the current backward pass (the next product adds to it).
    pending: bool,
}

impl std::fmt::Debug for GradSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        let (pending, dims) = match &state {
            Ok(s) => (s.pending, s.buf.as_ref().map(|b| b.dims().to_vec())),
            Err(_) => (false, None),
        };
        f.debug_struct("GradSink")
            .field("pending", &pending)
            .field("dims", &dims)
            .finish()
    }
}

impl GradSink {
    /// An empty sink; its buffer is allocated by the first backward pass.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> candle_core::Result<std::sync::MutexGuard<'_, SinkState>> {
        self.state
            .lock()
            .map_err(|_| msg("gradient sink: a thread panicked while holding it".into()))
    }

    /// Adds `W`'s gradient of this layer (`xᵀ·g` or `gᵀ·x`) to the buffer.
    fn accumulate(
        &self,
        x: &Tensor,
        g: &Tensor,
        w: &Tensor,
        layout: WeightLayout,
    ) -> candle_core::Result<()> {
        let mut state = self.lock()?;
        let fits = matches!(&state.buf, Some(b) if b.dims() == w.dims() && b.dtype() == w.dtype());
        if !fits {
            state.buf = Some(Tensor::zeros(w.dims(), w.dtype(), w.device())?);
            state.pending = false;
        }
        let op = AccumulateWeightGrad {
            x: x.detach(),
            g: g.detach(),
            layout,
            accumulate: state.pending,
        };
        if let Some(buf) = &state.buf {
            buf.inplace_op1(&op)?;
        }
        state.pending = true;
        Ok(())
    }

    /// Moves the accumulated gradient of `param` into `grads` (added to an entry already there, from
    /// uses of `param` outside sink layers). Returns whether there was one.
    pub fn flush(&self, param: &Tensor, grads: &mut GradStore) -> Result<bool> {
        let mut state = self.lock()?;
        if !state.pending {
            return Ok(false);
        }
        state.pending = false;
        let Some(buf) = state.buf.clone() else {
            return Ok(false);
        };
        if buf.dims() != param.dims() {
            return Err(Error::Shape {
                op: "gradient sink flush",
                left: buf.dims().to_vec(),
                right: param.dims().to_vec(),
            });
        }
        let g = match grads.get(param) {
            Some(existing) => (existing + &buf)?,
            None => buf,
        };
        grads.insert(param, g);
        Ok(true)
    }

    /// Forgets a pending gradient (after a failed step), so the next pass starts from zero.
    pub fn clear(&self) -> Result<()> {
        self.lock()?.pending = false;
        Ok(())
    }
}

/// In place on the sink's buffer: `buf (=|+=) xᵀ·g` (`[in, out]`) or `gᵀ·x` (`[out, in]`).
struct AccumulateWeightGrad {
    x: Tensor,
    g: Tensor,
    layout: WeightLayout,
    accumulate: bool,
}

impl AccumulateWeightGrad {
    fn run<T: CpuElem>(&self, dst: &mut [T], dst_layout: &Layout) -> candle_core::Result<()> {
        let (xs, xl) = self.x.storage_and_layout();
        let (gs, gl) = self.g.storage_and_layout();
        let (Storage::Cpu(xs), Storage::Cpu(gs)) = (&*xs, &*gs) else {
            return Err(msg("gradient sink: CPU tensors only".into()));
        };
        let xv = View::new(slice_of::<T>(xs, "sink input")?, xl, "sink input")?;
        let gv = View::new(slice_of::<T>(gs, "sink gradient")?, gl, "sink gradient")?;
        let (a, b) = match self.layout {
            WeightLayout::InOut => (xv.t(), gv),
            WeightLayout::OutIn => (gv.t(), xv),
        };
        let dims = dst_layout.dims();
        let dst = dst_layout
            .contiguous_offsets()
            .and_then(|(s, e)| dst.get_mut(s..e))
            .filter(|_| dims == [a.rows, b.cols] && a.cols == b.rows)
            .ok_or_else(|| {
                msg(format!(
                    "gradient sink: buffer {dims:?} does not fit {}×{} · {}×{}",
                    a.rows, a.cols, b.rows, b.cols
                ))
            })?;
        gemm_into(dst, a, b, self.accumulate)
    }
}

impl InplaceOp1 for AccumulateWeightGrad {
    fn name(&self) -> &'static str {
        "invar-sink-accumulate"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        match storage {
            CpuStorage::F32(v) => self.run::<f32>(v, layout),
            CpuStorage::F64(v) => self.run::<f64>(v, layout),
            other => Err(msg(format!(
                "gradient sink: f32 or f64, got {:?}",
                other.dtype()
            ))),
        }
    }
}

fn check(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<bool> {
    if x.rank() != 2 || w.rank() != 2 || b.is_some_and(|b| b.rank() != 1) {
        return Err(Error::Shape {
            op: "linear (x [B, in], W 2-D, b [out])",
            left: x.dims().to_vec(),
            right: w.dims().to_vec(),
        });
    }
    let dt = x.dtype();
    Ok(x.device().is_cpu()
        && matches!(dt, DType::F32 | DType::F64)
        && w.dtype() == dt
        && b.is_none_or(|b| b.dtype() == dt))
}

fn apply(x: &Tensor, w: &Tensor, b: Option<&Tensor>, op: LinearOp) -> Result<Tensor> {
    Ok(match b {
        Some(b) => x.apply_op3(w, b, op)?,
        None => x.apply_op2(w, op)?,
    })
}

/// `act(x·W + b)` (`W` `[in, out]`) or `act(x·Wᵀ + b)` (`W` `[out, in]`): `x` `[B, in]` → `[B, out]`.
/// On the CPU (f32, f64) one custom op; elsewhere [`linear_composite`].
pub fn linear(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    layout: WeightLayout,
    act: Activation,
) -> Result<Tensor> {
    if !check(x, w, b)? {
        return linear_composite(x, w, b, layout, act);
    }
    apply(
        x,
        w,
        b,
        LinearOp {
            layout,
            act,
            sink: None,
        },
    )
}

/// [`linear`] whose weight gradient goes to `sink` (see [`GradSink`]) instead of the gradient
/// store. On devices without the custom op it is [`linear_composite`] and the sink stays empty
/// (the gradient is in the store as usual; [`GradSink::flush`] then does nothing).
pub fn linear_with_sink(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    layout: WeightLayout,
    act: Activation,
    sink: &GradSink,
) -> Result<Tensor> {
    if !check(x, w, b)? {
        return linear_composite(x, w, b, layout, act);
    }
    apply(
        x,
        w,
        b,
        LinearOp {
            layout,
            act,
            sink: Some(sink.clone()),
        },
    )
}

/// The same layer from candle's own ops (`matmul`, `broadcast_add`, the activation): the path on
/// devices without the custom op, and the reference in tests.
pub fn linear_composite(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    layout: WeightLayout,
    act: Activation,
) -> Result<Tensor> {
    let h = match layout {
        WeightLayout::InOut => x.matmul(w)?,
        WeightLayout::OutIn => x.matmul(&w.t()?)?,
    };
    let h = match b {
        Some(b) => h.broadcast_add(b)?,
        None => h,
    };
    Ok(act.composite(&h)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    const ACTS: [Activation; 5] = [
        Activation::Identity,
        Activation::Tanh,
        Activation::Relu,
        Activation::Sigmoid,
        Activation::Elu,
    ];

    fn randn(shape: (usize, usize), dt: DType, seed: u64) -> Tensor {
        // Deterministic values without an RNG dependency: a scrambled sine.
        let n = shape.0 * shape.1;
        let v: Vec<f64> = (0..n)
            .map(|i| ((i as f64 + 1.0) * 12.9898 + seed as f64 * 78.233).sin() * 1.3)
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu)
            .and_then(|t| t.to_dtype(dt))
            .unwrap_or_else(|e| panic!("test tensor: {e}"))
    }

    fn weight_dims(layout: WeightLayout, din: usize, dout: usize) -> (usize, usize) {
        match layout {
            WeightLayout::InOut => (din, dout),
            WeightLayout::OutIn => (dout, din),
        }
    }

    /// `Σ y ⊙ r` for a fixed `r`, so every output element's gradient is different.
    fn weighted_sum(y: &Tensor, r: &Tensor) -> Tensor {
        y.mul(r).and_then(|t| t.sum_all()).unwrap()
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
        a.sub(b)
            .and_then(|d| d.abs())
            .and_then(|d| d.flatten_all())
            .and_then(|d| d.max(0))
            .and_then(|d| d.to_dtype(DType::F64))
            .and_then(|d| d.to_scalar::<f64>())
            .unwrap()
    }

    #[test]
    fn custom_op_matches_candles_composite_value_and_gradients() -> anyhow::Result<()> {
        let (bsz, din, dout) = (5, 7, 4);
        for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
            for act in ACTS {
                for with_bias in [true, false] {
                    let x = Var::from_tensor(&randn((bsz, din), DType::F64, 1))?;
                    let w =
                        Var::from_tensor(&randn(weight_dims(layout, din, dout), DType::F64, 2))?;
                    let b = Var::from_tensor(&randn((1, dout), DType::F64, 3).flatten_all()?)?;
                    let r = randn((bsz, dout), DType::F64, 4);
                    let bias = with_bias.then(|| b.as_tensor());
                    let y1 = linear(x.as_tensor(), w.as_tensor(), bias, layout, act)?;
                    let y2 = linear_composite(x.as_tensor(), w.as_tensor(), bias, layout, act)?;
                    let case = format!("{layout:?} {act:?} bias={with_bias}");
                    assert!(max_abs_diff(&y1, &y2) < 1e-12, "value {case}");
                    let g1 = weighted_sum(&y1, &r).backward()?;
                    let g2 = weighted_sum(&y2, &r).backward()?;
                    for (name, v) in [("x", &x), ("w", &w)] {
                        let (a, e) = (g1.get(v.as_tensor()), g2.get(v.as_tensor()));
                        let (Some(a), Some(e)) = (a, e) else {
                            panic!("{case}: no gradient for {name}");
                        };
                        assert!(max_abs_diff(a, e) < 1e-12, "grad {name} {case}");
                    }
                    match (g1.get(b.as_tensor()), g2.get(b.as_tensor())) {
                        (Some(a), Some(e)) => assert!(max_abs_diff(a, e) < 1e-12, "grad b {case}"),
                        (None, None) => assert!(!with_bias),
                        _ => panic!("{case}: bias gradient present in one path only"),
                    }
                }
            }
        }
        Ok(())
    }

    /// Central differences in f64, h = 1e-6: the truncation error is O(h²·f''') ≈ 1e-12 and the
    /// rounding error ≈ 1e-16 / h = 1e-10 relative, so 1e-6 relative (plus 1e-9 absolute) leaves a
    /// wide margin while any wrong term (a missing slope, a transposed product) is off by O(1).
    #[test]
    fn gradients_match_central_finite_differences() -> anyhow::Result<()> {
        let (bsz, din, dout) = (3, 4, 5);
        let h = 1e-6;
        for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
            for act in ACTS {
                let x = randn((bsz, din), DType::F64, 11);
                let w = randn(weight_dims(layout, din, dout), DType::F64, 12);
                let b = randn((1, dout), DType::F64, 13).flatten_all()?;
                let r = randn((bsz, dout), DType::F64, 14);
                // ReLU and ELU have a kink at 0: keep every pre-activation well away from it.
                let pre = linear(&x, &w, Some(&b), layout, Activation::Identity)?;
                let closest: f64 = pre.abs()?.flatten_all()?.min(0)?.to_scalar()?;
                assert!(
                    closest > 1e3 * h,
                    "{layout:?}: a pre-activation is {closest}"
                );
                let f = |x: &Tensor, w: &Tensor, b: &Tensor| -> f64 {
                    let y = linear(x, w, Some(b), layout, act).unwrap();
                    weighted_sum(&y, &r).to_scalar::<f64>().unwrap()
                };
                let (xv, wv, bv) = (
                    Var::from_tensor(&x)?,
                    Var::from_tensor(&w)?,
                    Var::from_tensor(&b)?,
                );
                let y = linear(
                    xv.as_tensor(),
                    wv.as_tensor(),
                    Some(bv.as_tensor()),
                    layout,
                    act,
                )?;
                let grads = weighted_sum(&y, &r).backward()?;
                for (which, t) in [("x", &x), ("w", &w), ("b", &b)] {
                    let var = match which {
                        "x" => &xv,
                        "w" => &wv,
                        _ => &bv,
                    };
                    let g: Vec<f64> = grads
                        .get(var.as_tensor())
                        .expect("gradient")
                        .flatten_all()?
                        .to_vec1()?;
                    let base: Vec<f64> = t.flatten_all()?.to_vec1()?;
                    for i in 0..base.len() {
                        let bump = |d: f64| -> anyhow::Result<Tensor> {
                            let mut v = base.clone();
                            v[i] += d;
                            Ok(Tensor::from_vec(v, t.dims(), &Device::Cpu)?)
                        };
                        let (p, m) = (bump(h)?, bump(-h)?);
                        let (fp, fm) = match which {
                            "x" => (f(&p, &w, &b), f(&m, &w, &b)),
                            "w" => (f(&x, &p, &b), f(&x, &m, &b)),
                            _ => (f(&x, &w, &p), f(&x, &w, &m)),
                        };
                        let fd = (fp - fm) / (2.0 * h);
                        assert!(
                            (g[i] - fd).abs() <= 1e-6 * fd.abs().max(1.0) + 1e-9,
                            "{layout:?} {act:?} d/d{which}[{i}]: op {} vs fd {fd}",
                            g[i]
                        );
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn untracked_input_gets_no_gradient_and_strided_inputs_work() -> anyhow::Result<()> {
        // x is plain data (the first layer's input): no input gradient is computed or stored.
        let x = randn((6, 3), DType::F32, 21);
        let w = Var::from_tensor(&randn((3, 2), DType::F32, 22))?;
        let y = linear(
            &x,
            w.as_tensor(),
            None,
            WeightLayout::InOut,
            Activation::Tanh,
        )?;
        let grads = y.sum_all()?.backward()?;
        assert!(grads.get(&x).is_none());
        assert!(grads.get(w.as_tensor()).is_some());
        // A transposed (non-contiguous) input is read through its strides, no copy needed.
        let xt = randn((3, 6), DType::F32, 23).t()?;
        assert!(!xt.is_contiguous());
        let a = linear(
            &xt,
            w.as_tensor(),
            None,
            WeightLayout::InOut,
            Activation::Relu,
        )?;
        let e = linear_composite(
            &xt,
            w.as_tensor(),
            None,
            WeightLayout::InOut,
            Activation::Relu,
        )?;
        assert!(max_abs_diff(&a, &e) < 1e-6);
        Ok(())
    }

    #[test]
    fn seed_like_f32_shapes_agree_with_the_composite_path() -> anyhow::Result<()> {
        // f32, sums over 300 products of values ~1: rounding ~ 300 · 6e-8 ≈ 2e-5 relative.
        let x = randn((16, 300), DType::F32, 31);
        let w = Var::from_tensor(&(randn((300, 200), DType::F32, 32) * 0.05)?)?;
        let b = Var::from_tensor(&randn((1, 200), DType::F32, 33).flatten_all()?)?;
        let r = randn((16, 200), DType::F32, 34);
        for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
            let wt = match layout {
                WeightLayout::InOut => w.as_tensor().clone(),
                WeightLayout::OutIn => w.as_tensor().t()?,
            };
            let y1 = linear(&x, &wt, Some(b.as_tensor()), layout, Activation::Tanh)?;
            let y2 = linear_composite(&x, &wt, Some(b.as_tensor()), layout, Activation::Tanh)?;
            assert!(max_abs_diff(&y1, &y2) < 1e-4);
            let g1 = weighted_sum(&y1, &r).backward()?;
            let g2 = weighted_sum(&y2, &r).backward()?;
            let (a, e) = (g1.get(w.as_tensor()), g2.get(w.as_tensor()));
            assert!(max_abs_diff(a.expect("grad"), e.expect("grad")) < 1e-3);
        }
        Ok(())
    }

    #[test]
    fn sink_gradients_equal_the_stores_and_are_not_stale() -> anyhow::Result<()> {
        // A tied weight used twice (encoder x·W, decoder h·Wᵀ) plus a plain use outside the sink.
        let w = Var::from_tensor(&randn((4, 3), DType::F64, 41))?;
        let b = Var::from_tensor(&randn((1, 3), DType::F64, 42).flatten_all()?)?;
        let r = randn((5, 4), DType::F64, 43);
        let sink = GradSink::new();
        let loss = |x: &Tensor, with_sink: bool| -> anyhow::Result<Tensor> {
            let (wt, bt) = (w.as_tensor(), b.as_tensor());
            let (enc, dec) = if with_sink {
                let h = linear_with_sink(
                    x,
                    wt,
                    Some(bt),
                    WeightLayout::InOut,
                    Activation::Tanh,
                    &sink,
                )?;
                (
                    h.clone(),
                    linear_with_sink(
                        &h,
                        wt,
                        None,
                        WeightLayout::OutIn,
                        Activation::Identity,
                        &sink,
                    )?,
                )
            } else {
                let h = linear(x, wt, Some(bt), WeightLayout::InOut, Activation::Tanh)?;
                (
                    h.clone(),
                    linear(&h, wt, None, WeightLayout::OutIn, Activation::Identity)?,
                )
            };
            let extra = wt.sqr()?.sum_all()?; // a use of W outside any sink layer
            Ok(((weighted_sum(&dec, &r) + enc.sum_all()?)? + extra)?)
        };
        for (step, seed) in [(0, 44u64), (1, 45)] {
            let x = randn((5, 4), DType::F64, seed);
            let want = loss(&x, false)?.backward()?;
            let mut got = loss(&x, true)?.backward()?;
            // Before the flush the store holds only the plain use's gradient (2W).
            let plain = got.get(w.as_tensor()).expect("plain use").clone();
            assert!(max_abs_diff(&plain, &(w.as_tensor() * 2.0)?) < 1e-12);
            assert!(
                sink.flush(w.as_tensor(), &mut got)?,
                "step {step}: pending gradient"
            );
            let (a, e) = (got.get(w.as_tensor()), want.get(w.as_tensor()));
            assert!(
                max_abs_diff(a.expect("grad"), e.expect("grad")) < 1e-12,
                "step {step}: the sink's gradient (overwritten, not added to the last step's)"
            );
            let (a, e) = (got.get(b.as_tensor()), want.get(b.as_tensor()));
            assert!(max_abs_diff(a.expect("grad"), e.expect("grad")) < 1e-12);
            assert!(!sink.flush(w.as_tensor(), &mut got)?, "flushed once");
        }
        Ok(())
    }

    #[test]
    fn shape_errors_are_errors() {
        let x = randn((2, 3), DType::F32, 51);
        let w = randn((4, 2), DType::F32, 52);
        assert!(linear(&x, &w, None, WeightLayout::InOut, Activation::Identity).is_err());
        let x3 = x.unsqueeze(0).unwrap();
        assert!(linear(&x3, &w, None, WeightLayout::InOut, Activation::Identity).is_err());
    }
}
