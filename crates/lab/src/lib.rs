//! cachesim's lab: many runs and the documents made of them, over the core
//! ([`cachesim_core`]). Calibration against real benchmark runs — input reports, case files,
//! fits and the validation table ([`calibrate`]); configuration sweeps ([`sweep`]); capacity
//! plans ([`plan`]); output reports in the benchmark clients' layouts and JSON ([`report`]) with
//! the overload diagnosis ([`saturation`]); one run under many seeds and the spread of its
//! metrics ([`seeds`]); error bars from cachesim's errors on the nearest measured runs
//! ([`trust`]); plots ([`plot`]); files written all or nothing ([`output`]).

pub mod calibrate;
pub mod output;
pub mod plan;
pub mod plot;
pub mod report;
pub mod saturation;
pub mod seeds;
pub mod sweep;
pub mod trust;
