//! Criterion benches of 000's hot paths: one training step's forward + backward on a 1000-pair batch
//! (M = 256, D = 64), applying a partition to 10 000 frames, and pair building for one class.
fn main() {}
