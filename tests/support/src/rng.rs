//! The seeded RNG of the randomized tests (fastrand's wyrand): every choice of
//! a case comes from it, so a case is replayed from its seed alone.

use std::time::Duration;

pub struct Rng(fastrand::Rng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }

    /// Seeded from `WEIR_TEST_SEED` if set, else from the clock; the seed is
    /// printed so a failure can be replayed.
    pub fn from_env(what: &str) -> Rng {
        let seed = match std::env::var("WEIR_TEST_SEED") {
            Ok(s) => s.parse().expect("WEIR_TEST_SEED is a number"),
            Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 % 1_000_000,
        };
        eprintln!("{what}: seed {seed} (replay with WEIR_TEST_SEED={seed})");
        Rng::new(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0.u64(lo..=hi)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.0.f64() < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.0.usize(..items.len())]
    }

    /// A duration uniform in `lo..hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.0.u64(lo..hi))
    }
}
