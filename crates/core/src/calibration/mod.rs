//! Calibration profiles as data: the fitted step-time factors of one (GPU, engine family) with
//! their fit record and the built-in registry ([`profile`]), the factors' names, bounds and
//! default objectives ([`factors`]), and the priors that price a run no profile fits
//! ([`prior`]). Fitting and validating them is the lab's (`calibrate`).

pub mod factors;
pub mod prior;
pub mod profile;
