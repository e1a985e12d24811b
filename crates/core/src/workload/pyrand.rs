//! The two random number generators the benchmark clients draw from, reproduced draw for draw
//! so a seeded cachesim run samples the same requests and send times as the real client with
//! the same seed. Both sit on MT19937 (`rand_mt`):
//!
//! * [`PyRandom`] — CPython's `random` module (`Modules/_randommodule.c`, `Lib/random.py`):
//!   `random.seed(int)` keys the twister with `init_by_array` over the integer's 32-bit words;
//!   `shuffle` is Fisher–Yates from the end with `_randbelow_with_getrandbits` (rejection
//!   sampling of `n.bit_length()` bits); `choice` is one `_randbelow`. vLLM's `ShareGPTDataset`
//!   and SGLang's `sample_sharegpt_requests` shuffle with it.
//! * [`NumpyLegacy`] — NumPy's global `np.random` (`RandomState`, `numpy/random/src/legacy/
//!   legacy-distributions.c`): `np.random.seed(int)` is `init_genrand`; doubles take 53 bits
//!   from two draws; `exponential` is `-log(1 - u)`; `gamma` is the legacy Marsaglia–Tsang /
//!   Ahrens–Dieter pair with the polar Gaussian. vLLM's `get_request` draws its gamma gaps and
//!   SGLang's its exponential gaps from it.

use rand_mt::Mt;

/// CPython's `random.Random`, for the calls the clients make.
pub struct PyRandom {
    mt: Mt,
}

impl PyRandom {
    /// `random.seed(seed)` for a non-negative integer seed (its 32-bit words, low first; zero
    /// is the one-word key `[0]`).
    pub fn new(seed: u64) -> Self {
        let mut n = seed;
        let mut key = Vec::with_capacity(2);
        loop {
            key.push(n as u32);
            n >>= 32;
            if n == 0 {
                break;
            }
        }
        Self { mt: Mt::new_with_key(key) }
    }

    /// `getrandbits(k)` for `1 <= k <= 32`.
    fn getrandbits(&mut self, k: u32) -> u32 {
        debug_assert!((1..=32).contains(&k));
        self.mt.next_u32() >> (32 - k)
    }

    /// `_randbelow_with_getrandbits(n)`: uniform on `[0, n)` by rejection, `n >= 1`.
    pub fn randbelow(&mut self, n: u32) -> u32 {
        debug_assert!(n >= 1);
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `random.shuffle(x)` in place.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        debug_assert!(x.len() <= u32::MAX as usize);
        for i in (1..x.len()).rev() {
            let j = self.randbelow(i as u32 + 1) as usize;
            x.swap(i, j);
        }
    }

    /// `random.choice(range(n))`, `n >= 1`.
    pub fn choice(&mut self, n: u32) -> u32 {
        self.randbelow(n)
    }
}

/// NumPy's legacy global generator (`np.random.seed` / `np.random.gamma` / `exponential`).
pub struct NumpyLegacy {
    mt: Mt,
    /// The polar method's second Gaussian, kept for the next call.
    gauss: Option<f64>,
}

impl NumpyLegacy {
    /// `np.random.seed(seed)`, `seed` in `[0, 2^32)`.
    pub fn new(seed: u32) -> Self {
        Self { mt: Mt::new(seed), gauss: None }
    }

    /// `random_sample()`: 53 random bits as a double in `[0, 1)`.
    pub fn double(&mut self) -> f64 {
        let a = (self.mt.next_u32() >> 5) as f64;
        let b = (self.mt.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }

    /// `standard_exponential()`.
    pub fn standard_exponential(&mut self) -> f64 {
        -(1.0 - self.double()).ln()
    }

    /// `exponential(scale)`.
    pub fn exponential(&mut self, scale: f64) -> f64 {
        scale * self.standard_exponential()
    }

    /// `standard_normal()` by the polar method, two at a time.
    pub fn gauss(&mut self) -> f64 {
        if let Some(g) = self.gauss.take() {
            return g;
        }
        loop {
            let x1 = 2.0 * self.double() - 1.0;
            let x2 = 2.0 * self.double() - 1.0;
            let r2 = x1 * x1 + x2 * x2;
            if r2 < 1.0 && r2 != 0.0 {
                let f = (-2.0 * r2.ln() / r2).sqrt();
                self.gauss = Some(f * x1);
                return f * x2;
            }
        }
    }

    /// `standard_gamma(shape)`, `shape > 0`.
    pub fn standard_gamma(&mut self, shape: f64) -> f64 {
        if shape == 1.0 {
            return self.standard_exponential();
        }
        if shape < 1.0 {
            loop {
                let u = self.double();
                let v = self.standard_exponential();
                if u <= 1.0 - shape {
                    let x = u.powf(1.0 / shape);
                    if x <= v {
                        return x;
                    }
                } else {
                    let y = -((1.0 - u) / shape).ln();
                    let x = (1.0 - shape + shape * y).powf(1.0 / shape);
                    if x <= v + y {
                        return x;
                    }
                }
            }
        }
        let b = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * b).sqrt();
        loop {
            let (x, mut v) = loop {
                let x = self.gauss();
                let v = 1.0 + c * x;
                if v > 0.0 {
                    break (x, v);
                }
            };
            v = v * v * v;
            let u = self.double();
            if u < 1.0 - 0.0331 * (x * x) * (x * x) {
                return b * v;
            }
            if u.ln() < 0.5 * x * x + b * (1.0 - v + v.ln()) {
                return b * v;
            }
        }
    }

    /// `gamma(shape, scale)`.
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        scale * self.standard_gamma(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values printed by CPython 3.11 and NumPy 2.x with the same seeds (the snippets
    // are in the test names' comments); a mismatch means the draw order differs.

    #[test]
    fn cpython_shuffle_and_choice() {
        // random.seed(0); x = list(range(10)); random.shuffle(x)
        let mut r = PyRandom::new(0);
        let mut x: Vec<u32> = (0..10).collect();
        r.shuffle(&mut x);
        assert_eq!(x, SHUFFLE_SEED0);
        // random.seed(1); x = list(range(1000)); random.shuffle(x); x[:8]
        let mut r = PyRandom::new(1);
        let mut x: Vec<u32> = (0..1000).collect();
        r.shuffle(&mut x);
        assert_eq!(&x[..8], SHUFFLE_SEED1_1000);
        // random.seed(2**40 + 7); [random.choice(range(97)) for _ in range(6)]
        let mut r = PyRandom::new((1 << 40) + 7);
        let c: Vec<u32> = (0..6).map(|_| r.choice(97)).collect();
        assert_eq!(c, CHOICE_BIG_SEED);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 4.0 * f64::EPSILON * b.abs().max(1e-300)
    }

    #[test]
    fn numpy_legacy_draws() {
        // np.random.seed(0); np.random.random_sample(3)
        let mut n = NumpyLegacy::new(0);
        for e in NP_DOUBLE_SEED0 {
            assert_eq!(n.double(), e);
        }
        // np.random.seed(1); [np.random.exponential(0.25) for _ in range(4)]
        let mut n = NumpyLegacy::new(1);
        for e in NP_EXP_SEED1 {
            let v = n.exponential(0.25);
            assert!(close(v, e), "{v} vs {e}");
        }
        // np.random.seed(0); [np.random.gamma(k, 1.0) for k in (0.5, 2.0, 0.5, 3.5, 1.0)]
        let mut n = NumpyLegacy::new(0);
        for (k, e) in [0.5, 2.0, 0.5, 3.5, 1.0].into_iter().zip(NP_GAMMA_SEED0) {
            let v = n.gamma(k, 1.0);
            assert!(close(v, e), "shape {k}: {v} vs {e}");
        }
    }

    const SHUFFLE_SEED0: [u32; 10] = [7, 8, 1, 5, 3, 4, 2, 0, 9, 6];
    const SHUFFLE_SEED1_1000: [u32; 8] = [852, 836, 280, 575, 208, 609, 932, 725];
    const CHOICE_BIG_SEED: [u32; 6] = [78, 95, 81, 73, 90, 60];
    const NP_DOUBLE_SEED0: [f64; 3] = [0.5488135039273248, 0.7151893663724195, 0.6027633760716439];
    const NP_EXP_SEED1: [f64; 4] =
        [0.13490145931479636, 0.31853131325332606, 2.859533966077148e-05, 0.09000318871347975];
    const NP_GAMMA_SEED0: [f64; 5] =
        [0.3040018897607044, 3.2764187731730336, 0.4522643969597036, 9.062439063938212, 3.314912182053814];
}
