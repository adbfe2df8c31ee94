//! `set_cpu_threads` in a process of its own (rayon's global pool can be sized once per process).

use invar_ops::{set_cpu_threads, Error};
use rayon::prelude::*;

#[test]
fn sizes_gemm_and_rayon_once_and_refuses_a_second_size() {
    assert_eq!(set_cpu_threads(3).unwrap(), 3);
    assert_eq!(rayon::current_num_threads(), 3);
    // The calling thread is worker 0: its parallel loops run in place, not queued while it blocks.
    assert_eq!(rayon::current_thread_index(), Some(0));
    let here = std::thread::current().id();
    let ran_here = (0..64)
        .into_par_iter()
        .map(|_| std::thread::current().id() == here)
        .filter(|&b| b)
        .count();
    assert!(
        ran_here > 0,
        "no item of a parallel loop ran on the calling thread"
    );
    // Work handed to the pool from another thread still runs (on workers 1 and 2).
    let total: u64 = std::thread::spawn(|| (1..=1000u64).into_par_iter().sum())
        .join()
        .unwrap();
    assert_eq!(total, 500_500);
    assert_eq!(std::env::var("RAYON_NUM_THREADS").unwrap(), "3");
    // candle's element-wise ops on the calling thread: its barrier pool has no spinning worker,
    // and a product over that pool (≥ 64 Ki elements) still gives the right values.
    assert_eq!(std::env::var("CANDLE_NUM_THREADS").unwrap(), "1");
    assert_eq!(candle_core::utils::barrier_pool().n_workers(), 0);
    let n = 1 << 17;
    let a = candle_core::Tensor::arange(0f32, n as f32, &candle_core::Device::Cpu).unwrap();
    let sum: Vec<f32> = (&a + &a).unwrap().to_vec1().unwrap();
    assert!(sum.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
    // The pool exists now: a second size is an error that names the count, not a panic.
    match set_cpu_threads(2) {
        Err(Error::Threads { threads: 2, .. }) => {}
        other => panic!("expected a Threads error, got {other:?}"),
    }
    // 0 leaves what is there alone.
    assert_eq!(set_cpu_threads(0).unwrap(), 3);
}
