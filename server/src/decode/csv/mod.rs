//! CSV records → one tensor per column, exactly as `tf.io.decode_csv` (and, per record,
//! `tf.data.experimental.CsvDataset`) decode them. No I/O.
//!
//! The two ops split fields differently; [`CsvDialect`] picks one:
//!
//! - [`CsvDialect::DecodeCsv`] (`tf.io.decode_csv`, on lines): an empty record has no
//!   fields; `\n`/`\r` at the start of a field are skipped, elsewhere outside quotes they
//!   are an error; once the last of `select_cols` is read the rest of the record is not
//!   looked at. Errors name the record by its index in the batch.
//! - [`CsvDialect::CsvDataset`] (records as [`crate::format::csv`] frames them: quoted
//!   fields may hold line breaks): an empty record (a blank line) is one empty field;
//!   every field is checked. Errors say `in record` without an index, as TensorFlow's do
//!   (the caller names the record by its key).
//!
//! Shared rules: a field starting with `"` (when `use_quote_delim`) is quoted and `""`
//! inside it is one `"`; an empty field, or one equal to `na_value`, takes the column's
//! default (a column without one is required); numbers parse as `crate::decode::number`
//! says. The first error in record order wins, as in TensorFlow. String values are
//! slices of the record (no copy) unless they held escaped quotes.
//!
//! The files: `config.rs` holds the columns and options and checks them as TensorFlow
//! does; `error.rs` the messages and [`BatchError`]; `fields.rs` splits a record into
//! fields under each dialect (and reads a `CsvDataset` header); `column.rs` converts
//! fields into the output columns; `decode.rs` holds the entry points, per batch and per
//! record.

mod column;
mod config;
mod decode;
mod error;
mod fields;
#[cfg(test)]
mod testing;

pub use config::{CsvColumn, CsvConfig, CsvDefault, CsvDialect};
pub use decode::{decode_batch, decode_csv, decode_placed, decode_records};
pub use error::BatchError;
