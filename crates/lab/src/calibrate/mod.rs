//! Calibration and validation against real benchmark runs: reading the clients' reports
//! ([`report`]) and the case files of `calibration/cases/` with the validation table
//! ([`case`], [`validation`]), kernel-level step cases ([`kernels`]), the rows of a measured-points CSV as cases ([`silicon`]), phase points ([`phase`]), what a simulation predicts for a case ([`prediction`]), fitting step-time profiles ([`fit`], how well the cases determine each factor [`spread`]; the
//! profiles themselves are [`cachesim_core::calibration`]), the refits of the honest validation modes ([`holdout`]) and the validation
//! scatter
//! ([`plot`]).

pub mod case;
pub mod fit;
pub mod holdout;
pub mod kernels;
pub mod phase;
pub mod plot;
pub mod prediction;
pub mod report;
pub mod silicon;
pub mod spread;
pub mod totals;
pub mod validation;
