//! Bayesian ridge regression on standardised features, as llm-d's latency predictor fits it
//! with `LATENCY_MODEL_TYPE=bayesian_ridge`: scikit-learn's `StandardScaler` (population
//! standard deviation; a constant column scales by 1) then `BayesianRidge` with its defaults
//! (`sklearn/linear_model/_bayes.py` `BayesianRidge.fit`, 1.x: gamma priors 1e-6, α₀ =
//! 1 / (var y + ε), λ₀ = 1, at most 300 evidence updates until the coefficients move by less
//! than 1e-3, then a last coefficient update and the posterior covariance; `predict` with
//! `return_std`: √(xᵀΣx + 1/α)).
//!
//! Where scikit-learn takes the SVD of the centred design, this works from running sums
//! ([`Sums`]: count, Σx, Σxxᵀ, Σy, Σy², Σxy), which a training set that gains and drops samples
//! keeps up to date at the cost of one outer product, and from the eigen-decomposition of the
//! standardised Gram matrix (its eigenvalues are the squared singular values). The fit is the
//! same in exact arithmetic; it keeps the `min(n, p)` largest eigenpairs as the thin SVD does,
//! `p` counting the columns upstream has that are constant here (`full_columns`: always 0 or
//! always equal), which only matters below `p` samples. The eigen-decomposition is cyclic
//! Jacobi on a matrix of at most a dozen rows (the crates that have one would add a linear
//! algebra library to the build for it).

/// Running sums of a training set of `p`-column rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Sums {
    p: usize,
    n: f64,
    x: Vec<f64>,
    /// Σxxᵀ, row-major `p × p`.
    xx: Vec<f64>,
    y: f64,
    yy: f64,
    xy: Vec<f64>,
}

impl Sums {
    pub fn new(p: usize) -> Self {
        Sums { p, n: 0.0, x: vec![0.0; p], xx: vec![0.0; p * p], y: 0.0, yy: 0.0, xy: vec![0.0; p] }
    }

    /// Samples in the set.
    pub fn count(&self) -> u64 {
        self.n as u64
    }

    /// Adds (`sign` 1) or removes (`sign` −1) the sample `(row, target)`.
    pub fn update(&mut self, row: &[f64], target: f64, sign: f64) {
        debug_assert_eq!(row.len(), self.p);
        self.n += sign;
        self.y += sign * target;
        self.yy += sign * target * target;
        for (j, &a) in row.iter().enumerate() {
            self.x[j] += sign * a;
            self.xy[j] += sign * a * target;
            for (k, &b) in row.iter().enumerate() {
                self.xx[j * self.p + k] += sign * a * b;
            }
        }
    }

    /// The sums of two sets.
    pub fn merged(&self, other: &Sums) -> Sums {
        let add = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x + y).collect();
        Sums {
            p: self.p,
            n: self.n + other.n,
            x: add(&self.x, &other.x),
            xx: add(&self.xx, &other.xx),
            y: self.y + other.y,
            yy: self.yy + other.yy,
            xy: add(&self.xy, &other.xy),
        }
    }
}

/// A fitted model.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    mean: Vec<f64>,
    scale: Vec<f64>,
    coef: Vec<f64>,
    intercept: f64,
    /// Posterior covariance of the coefficients, `p × p`.
    sigma: Vec<f64>,
    /// Noise precision α.
    alpha: f64,
}

/// scikit-learn's `BayesianRidge` defaults.
const MAX_ITER: usize = 300;
const TOL: f64 = 1e-3;
const PRIOR: f64 = 1e-6;

/// Fits the samples `s` sums up; `full_columns`: the columns upstream's design has (≥ the
/// row length). `None` without samples.
pub fn fit(s: &Sums, full_columns: usize) -> Option<Fit> {
    let (p, n) = (s.p, s.n);
    if n < 1.0 {
        return None;
    }
    let mean: Vec<f64> = s.x.iter().map(|x| x / n).collect();
    let var = |j: usize| (s.xx[j * p + j] / n - mean[j] * mean[j]).max(0.0);
    // StandardScaler: a column whose variance is within rounding of 0 keeps scale 1 (here the
    // rounding of sums that samples also left: relative to the column's mean square).
    let scale: Vec<f64> = (0..p)
        .map(|j| {
            let v = var(j);
            if v <= 1e-10 * (s.xx[j * p + j] / n).max(f64::MIN_POSITIVE) {
                1.0
            } else {
                v.sqrt()
            }
        })
        .collect();
    let y_mean = s.y / n;
    // The standardised, centred Gram matrix, Zᵀy and yᵀy of the centred target.
    let mut gram = vec![0.0; p * p];
    for j in 0..p {
        for k in 0..p {
            gram[j * p + k] = (s.xx[j * p + k] - n * mean[j] * mean[k]) / (scale[j] * scale[k]);
        }
    }
    let zy: Vec<f64> = (0..p).map(|j| (s.xy[j] - n * mean[j] * y_mean) / scale[j]).collect();
    let yy = (s.yy - n * y_mean * y_mean).max(0.0);
    let (mut eig, vecs) = jacobi(&gram, p);
    for e in &mut eig {
        *e = e.max(0.0);
    }
    // Eigenpairs, largest first; the thin SVD has min(n, full) of them.
    let mut order: Vec<usize> = (0..p).collect();
    order.sort_by(|&a, &b| eig[b].total_cmp(&eig[a]));
    order.truncate((n as usize).min(full_columns.max(p)));
    // vᵀZᵀy per kept eigenvector.
    let proj: Vec<f64> = order.iter().map(|&k| (0..p).map(|j| vecs[j * p + k] * zy[j]).sum()).collect();
    let coef_of = |alpha: f64, lambda: f64| -> Vec<f64> {
        let mut c = vec![0.0; p];
        for (m, &k) in order.iter().enumerate() {
            let w = proj[m] / (eig[k] + lambda / alpha);
            for (j, cj) in c.iter_mut().enumerate() {
                *cj += vecs[j * p + k] * w;
            }
        }
        c
    };
    let rss = |c: &[f64]| -> f64 {
        let mut q = 0.0;
        for j in 0..p {
            for k in 0..p {
                q += c[j] * gram[j * p + k] * c[k];
            }
        }
        (yy - 2.0 * c.iter().zip(&zy).map(|(a, b)| a * b).sum::<f64>() + q).max(0.0)
    };
    let eps = f64::EPSILON;
    let mut alpha = 1.0 / (yy / n + eps);
    let mut lambda = 1.0;
    let mut old: Option<Vec<f64>> = None;
    for _ in 0..MAX_ITER {
        let c = coef_of(alpha, lambda);
        let r = rss(&c);
        let gamma: f64 = order.iter().map(|&k| alpha * eig[k] / (lambda + alpha * eig[k])).sum();
        lambda = (gamma + 2.0 * PRIOR) / (c.iter().map(|x| x * x).sum::<f64>() + 2.0 * PRIOR);
        alpha = (n - gamma + 2.0 * PRIOR) / (r + 2.0 * PRIOR);
        let converged = old.as_ref().is_some_and(|o| o.iter().zip(&c).map(|(a, b)| (a - b).abs()).sum::<f64>() < TOL);
        if converged {
            break;
        }
        old = Some(c);
    }
    let coef = coef_of(alpha, lambda);
    let mut sigma = vec![0.0; p * p];
    for &k in &order {
        let d = 1.0 / ((eig[k] + lambda / alpha) * alpha);
        for j in 0..p {
            for l in 0..p {
                sigma[j * p + l] += vecs[j * p + k] * vecs[l * p + k] * d;
            }
        }
    }
    Some(Fit { mean, scale, coef, intercept: y_mean, sigma, alpha })
}

impl Fit {
    /// The predictive mean and standard deviation at `row`.
    pub fn predict(&self, row: &[f64]) -> (f64, f64) {
        let p = self.coef.len();
        let z: Vec<f64> = row.iter().zip(&self.mean).zip(&self.scale).map(|((x, m), s)| (x - m) / s).collect();
        let mean = self.intercept + z.iter().zip(&self.coef).map(|(a, b)| a * b).sum::<f64>();
        let mut q = 0.0;
        for j in 0..p {
            for k in 0..p {
                q += z[j] * self.sigma[j * p + k] * z[k];
            }
        }
        (mean, (q.max(0.0) + 1.0 / self.alpha).sqrt())
    }
}

/// Eigenvalues and eigenvectors (column `k` of the row-major result) of the symmetric `p × p`
/// matrix `a`, by cyclic Jacobi rotations.
fn jacobi(a: &[f64], p: usize) -> (Vec<f64>, Vec<f64>) {
    let mut m = a.to_vec();
    let mut v = vec![0.0; p * p];
    for i in 0..p {
        v[i * p + i] = 1.0;
    }
    let norm: f64 = m.iter().map(|x| x * x).sum::<f64>().sqrt();
    for _ in 0..100 {
        let off: f64 = (0..p)
            .flat_map(|i| (0..p).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| m[i * p + j].powi(2))
            .sum();
        if off.sqrt() <= 1e-15 * norm.max(f64::MIN_POSITIVE) {
            break;
        }
        for i in 0..p {
            for j in i + 1..p {
                let aij = m[i * p + j];
                if aij == 0.0 {
                    continue;
                }
                let theta = (m[j * p + j] - m[i * p + i]) / (2.0 * aij);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..p {
                    let (mki, mkj) = (m[k * p + i], m[k * p + j]);
                    m[k * p + i] = c * mki - s * mkj;
                    m[k * p + j] = s * mki + c * mkj;
                }
                for k in 0..p {
                    let (mik, mjk) = (m[i * p + k], m[j * p + k]);
                    m[i * p + k] = c * mik - s * mjk;
                    m[j * p + k] = s * mik + c * mjk;
                }
                for k in 0..p {
                    let (vki, vkj) = (v[k * p + i], v[k * p + j]);
                    v[k * p + i] = c * vki - s * vkj;
                    v[k * p + j] = s * vki + c * vkj;
                }
            }
        }
    }
    ((0..p).map(|i| m[i * p + i]).collect(), v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums(rows: &[(Vec<f64>, f64)]) -> Sums {
        let mut s = Sums::new(rows[0].0.len());
        for (x, y) in rows {
            s.update(x, *y, 1.0);
        }
        s
    }

    /// The eigen-decomposition reproduces the matrix: A v = e v.
    #[test]
    fn jacobi_diagonalises() {
        let a = [4.0, 1.0, 2.0, 1.0, 3.0, 0.5, 2.0, 0.5, 5.0];
        let (e, v) = jacobi(&a, 3);
        for k in 0..3 {
            for i in 0..3 {
                let av: f64 = (0..3).map(|j| a[i * 3 + j] * v[j * 3 + k]).sum();
                assert!((av - e[k] * v[i * 3 + k]).abs() < 1e-12, "{k} {i}");
            }
        }
        assert!((e.iter().sum::<f64>() - 12.0).abs() < 1e-12, "the trace is kept");
    }

    /// y = 3 + 2x exactly on many points: the evidence drives the noise precision up and the
    /// fit is the line, to the ridge's shrinkage (λ/α → 0).
    #[test]
    fn an_exact_line_is_recovered() {
        let rows: Vec<_> = (0..50).map(|i| (vec![i as f64, 7.0], 3.0 + 2.0 * i as f64)).collect();
        let f = fit(&sums(&rows), 2).unwrap();
        let (m, sd) = f.predict(&[100.0, 7.0]);
        assert!((m - 203.0).abs() < 1e-3, "{m}");
        assert!(sd < 1e-2, "{sd}");
    }

    /// Values from scikit-learn 1.9.1 (`StandardScaler` then `BayesianRidge()`,
    /// `predict(return_std=True)`), the script in the comment: six noisy points of two
    /// features; 200 points of four features, the last constant in training and 4 in the second
    /// query (its posterior variance 1/λ shows in the spread); and three of those points, fewer
    /// than the columns.
    ///
    /// ```text
    /// i = np.arange(200.0)
    /// X = np.c_[np.sin(i), 10*np.cos(1.3*i)+5, 100*np.sin(0.7*i)+50, np.full(200, 3.0)]
    /// y = 2*X[:,0] + 0.3*X[:,1] + 0.05*X[:,2] + 2*np.sin(5.1*i) + 7
    /// ```
    #[test]
    fn matches_scikit_learn() {
        let close = |a: (f64, f64), b: (f64, f64)| (a.0 - b.0).abs() < 1e-6 && (a.1 - b.1).abs() < 1e-6;
        let six = vec![
            (vec![1.0, 10.0], 12.0),
            (vec![2.0, 8.0], 15.0),
            (vec![3.0, 13.0], 21.0),
            (vec![4.0, 7.0], 19.0),
            (vec![5.0, 11.0], 28.0),
            (vec![6.0, 9.0], 27.0),
        ];
        let f = fit(&sums(&six), 2).unwrap();
        let got = f.predict(&[3.5, 9.0]);
        assert!(close(got, (19.74489057, 1.17580327)), "{got:?}");
        let rows: Vec<_> = (0..200)
            .map(|i| {
                let i = i as f64;
                let x = vec![i.sin(), 10.0 * (1.3 * i).cos() + 5.0, 100.0 * (0.7 * i).sin() + 50.0, 3.0];
                let y = 2.0 * x[0] + 0.3 * x[1] + 0.05 * x[2] + 2.0 * (5.1 * i).sin() + 7.0;
                (x, y)
            })
            .collect();
        let f = fit(&sums(&rows), 4).unwrap();
        let got = f.predict(&[0.5, 3.0, 60.0, 3.0]);
        assert!(close(got, (11.88719227, 1.42084689)), "{got:?}");
        let got = f.predict(&[1.0, 1.0, 1.0, 4.0]);
        assert!(close(got, (9.36249914, 2.909024)), "{got:?}");
        let f = fit(&sums(&rows[..3]), 4).unwrap();
        // The mean only: below p samples the thin SVD keeps a direction of the null space
        // LAPACK chooses (scikit-learn's spread here is 0.7878799).
        let got = f.predict(&[0.5, 3.0, 60.0, 3.0]);
        assert!((got.0 - 13.67185963).abs() < 1e-6, "{got:?}");
    }

    /// Removing a sample undoes adding it; one sample fits its target everywhere.
    #[test]
    fn sums_add_and_remove() {
        let mut s = Sums::new(2);
        s.update(&[1.0, 2.0], 5.0, 1.0);
        let one = s.clone();
        s.update(&[3.0, 4.0], 6.0, 1.0);
        s.update(&[3.0, 4.0], 6.0, -1.0);
        assert_eq!(s, one);
        let f = fit(&s, 14).unwrap();
        assert_eq!(f.predict(&[9.0, 9.0]).0, 5.0);
        assert!(fit(&Sums::new(3), 3).is_none());
    }
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// Sums that gained and lost samples fit as the sums of what is left, to rounding; a
        /// fit's spread is positive and its predictions finite. (More samples than columns:
        /// below that the spread depends on which null direction is kept, as the module says.)
        #[test]
        fn sums_kept_up_to_date_fit_as_fresh_ones(
            rows in proptest::collection::vec((proptest::collection::vec(-100.0f64..100.0, 3), -50.0f64..50.0), 5..60),
            dropped in 0usize..20,
        ) {
            let mut kept = Sums::new(3);
            for (x, y) in &rows {
                kept.update(x, *y, 1.0);
            }
            let dropped = dropped.min(rows.len() - 4);
            for (x, y) in &rows[..dropped] {
                kept.update(x, *y, -1.0);
            }
            let fresh = sums(&rows[dropped..]);
            let (a, b) = (fit(&kept, 3).unwrap(), fit(&fresh, 3).unwrap());
            let q = [1.0, -2.0, 3.0];
            let ((ma, sa), (mb, sb)) = (a.predict(&q), b.predict(&q));
            proptest::prop_assert!(ma.is_finite() && sa.is_finite() && sa > 0.0, "{} {}", ma, sa);
            let tol = 1e-6 * (1.0 + mb.abs());
            proptest::prop_assert!((ma - mb).abs() < tol.max(1e-3), "{} {}", ma, mb);
            proptest::prop_assert!((sa - sb).abs() < 1e-3 * (1.0 + sb), "{} {}", sa, sb);
        }
    }
}
