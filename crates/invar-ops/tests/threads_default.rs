//! `set_default_cpu_threads` in a process of its own (rayon's global pool can be sized once per
//! process): the count comes from `RAYON_NUM_THREADS` as rayon would read it, the calling thread
//! is worker 0, and a `CANDLE_NUM_THREADS` the user chose is kept.

#[test]
fn default_threads_follow_rayon_num_threads_and_keep_the_users_candle_setting() {
    std::env::set_var("RAYON_NUM_THREADS", " 3 ");
    std::env::set_var("CANDLE_NUM_THREADS", "2");
    assert_eq!(invar_ops::default_cpu_threads(), 3);
    assert_eq!(invar_ops::set_default_cpu_threads().unwrap(), 3);
    assert_eq!(rayon::current_num_threads(), 3);
    assert_eq!(rayon::current_thread_index(), Some(0));
    assert_eq!(std::env::var("CANDLE_NUM_THREADS").unwrap(), "2");
    // Not a number, or 0: the CPUs this process may use, as rayon itself falls back.
    for bad in ["0", "many"] {
        std::env::set_var("RAYON_NUM_THREADS", bad);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(invar_ops::default_cpu_threads(), cpus);
    }
}
