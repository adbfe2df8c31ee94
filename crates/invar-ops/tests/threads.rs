//! `set_cpu_threads` in a process of its own (rayon's global pool can be sized once per process).

use invar_ops::{set_cpu_threads, Error};

#[test]
fn sizes_gemm_and_rayon_once_and_refuses_a_second_size() {
    assert_eq!(set_cpu_threads(3).unwrap(), 3);
    assert_eq!(rayon::current_num_threads(), 3);
    assert_eq!(std::env::var("RAYON_NUM_THREADS").unwrap(), "3");
    assert!(std::env::var("CANDLE_NUM_THREADS").is_err());
    // The pool exists now: a second size is an error that names the count, not a panic.
    match set_cpu_threads(2) {
        Err(Error::Threads { threads: 2, .. }) => {}
        other => panic!("expected a Threads error, got {other:?}"),
    }
    // 0 leaves what is there alone.
    assert_eq!(set_cpu_threads(0).unwrap(), 3);
}
