//! cachesim's lab: many runs and the documents made of them, over the core
//! ([`cachesim_core`]). Calibration against real benchmark runs — input reports, case files,
//! fits and the validation table ([`calibrate`]); configuration sweeps ([`sweep`]); capacity
//! plans ([`plan`]); output reports in the benchmark clients' layouts and JSON ([`report`]) with
//! the overload diagnosis ([`saturation`]); plots ([`plot`]); files written all or nothing
//! ([`output`]).

pub mod calibrate;
pub mod output;
pub mod plan;
pub mod plot;
pub mod report;
pub mod saturation;
pub mod sweep;
