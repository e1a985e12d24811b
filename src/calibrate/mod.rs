//! Calibration and validation against real benchmark runs: reading the clients' reports
//! ([`report`]) and the case files of `calibration/cases/` with the validation table
//! ([`case`]). Fitting step-time profiles is not built yet.

pub mod case;
pub mod fit;
pub mod profile;
pub mod report;
pub mod report_json;
