//! CSV plumbing shared by the length-only readers: typed rows via `csv` + serde, errors that
//! name the line and the column header, lenient skipping.

use super::json::{handle_bad, Checked};
use super::Skipped;
use crate::error::{Location, RecordError};
use crate::messages::{plain, Syntax};
use serde::de::DeserializeOwned;

/// Reads every data row of a CSV document with a header line into `T` and converts it, in
/// file order; bad rows are errors (or counted, when lenient).
pub fn read_csv<T: DeserializeOwned, R>(
    bytes: &[u8],
    lenient: bool,
    skipped: &mut Skipped,
    mut convert: impl FnMut(T) -> Checked<Option<R>>,
) -> Result<Vec<R>, RecordError> {
    let mut rdr = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(bytes);
    let headers: Vec<String> = match rdr.headers() {
        Ok(h) => h.iter().map(str::to_string).collect(),
        Err(e) => {
            return Err(RecordError { location: Location::Line(1), field: String::new(), message: e.to_string() })
        }
    };
    let mut out = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        let line = rdr.position().line() + 1;
        match rdr.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                let line = record.position().map_or(line, |p| p.line());
                match record.deserialize::<T>(Some(&csv::StringRecord::from(headers.clone()))) {
                    Ok(row) => match convert(row) {
                        Ok(Some(r)) => out.push(r),
                        Ok(None) => {}
                        Err((field, message)) => {
                            let e = RecordError { location: Location::Line(line), field, message };
                            handle_bad(e, lenient, skipped)?
                        }
                    },
                    Err(e) => {
                        let (field, message) = match e.kind() {
                            csv::ErrorKind::Deserialize { err, .. } => {
                                let field =
                                    err.field().and_then(|i| headers.get(i as usize)).cloned().unwrap_or_default();
                                (field, plain(&err.kind().to_string(), Syntax::Csv))
                            }
                            _ => (String::new(), e.to_string()),
                        };
                        handle_bad(RecordError { location: Location::Line(line), field, message }, lenient, skipped)?;
                    }
                }
            }
            Err(e) => {
                let line = e.position().map_or(line, |p| p.line());
                let message = match e.kind() {
                    csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                        format!("{len} columns where the header has {expected_len}")
                    }
                    _ => e.to_string(),
                };
                handle_bad(
                    RecordError { location: Location::Line(line), field: String::new(), message },
                    lenient,
                    skipped,
                )?;
            }
        }
    }
    Ok(out)
}
