//! A run's per-request, per-step, per-token and scaling tables as CSV. serde's and csv's generic
//! code is compiled in the crate that instantiates it, and the command line and the lab build
//! unoptimised (the root Cargo.toml): these tables, the large ones, are instantiated here, in the
//! optimised core, so that writing a 16-instance run's `--timeline-csv` costs what it did.

use std::io::Write;

use serde::Serialize;

use crate::metrics::RequestRecord;
use crate::sim::{ScaleSync, StepRecord, TokenRecord};

/// What writing a table gives: nothing, or csv's error (a serialisation or an I/O failure).
pub type Written = csv::Result<()>;

/// A row of a table that writes itself as CSV: a header from the field names, then one line per
/// row.
pub trait TableRow: Sized {
    fn write_csv(rows: &[Self], w: &mut dyn Write) -> Written;
}

/// Writes `rows` as CSV to `w`.
pub fn write_rows<T: Serialize>(w: &mut dyn Write, rows: &[T]) -> Written {
    let mut out = csv::Writer::from_writer(w);
    for r in rows {
        out.serialize(r)?;
    }
    out.flush()?;
    Ok(())
}

/// Implements [`TableRow`] for each type named, compiled in the crate that invokes it (at its
/// optimisation level).
#[macro_export]
macro_rules! table_rows {
    ($($t:ty),*) => {$(
        impl $crate::table::TableRow for $t {
            fn write_csv(rows: &[Self], w: &mut dyn ::std::io::Write) -> $crate::table::Written {
                $crate::table::write_rows(w, rows)
            }
        }
    )*};
}

crate::table_rows!(RequestRecord, StepRecord, TokenRecord, ScaleSync);
