//! `set_cpu_threads(1)` in a process of its own (rayon's global pool can be sized once per
//! process): one thread is a worker of its own, not the calling thread, since a pool made only of
//! the calling thread would never run work handed to it from another thread.

use rayon::prelude::*;

#[test]
fn one_thread_is_a_worker_of_its_own() {
    assert_eq!(invar_ops::set_cpu_threads(1).unwrap(), 1);
    assert_eq!(rayon::current_thread_index(), None);
    let total: u64 = std::thread::spawn(|| (1..=1000u64).into_par_iter().sum())
        .join()
        .unwrap();
    assert_eq!(total, 500_500);
    assert_eq!((1..=10u64).into_par_iter().sum::<u64>(), 55);
}
