//! The fixed-width columns of a batch's rows gathered from their Arrow batches: each
//! value copied once, from its Arrow array into the tensor. Rows that run on in one Arrow
//! batch (a file read in order) are one copy per column; rows that alternate between a
//! few batches (files interleaved, a shuffle buffer's draws) a constant-width copy each,
//! from arrays looked up once per column and batch.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::Builder;
use super::arrow_rows::{ArrowRow, ArrowRows, ArrowValues};

/// Runs at least this long on average are copied whole.
const RUN_ROWS: usize = 8;

/// Where the rows of a batch come from.
pub(super) struct Sources<'a> {
    rows: &'a [&'a ArrowRow],
    /// The distinct Arrow batches, and each row's among them.
    batches: Vec<&'a ArrowRows>,
    batch_of: Vec<usize>,
    /// Rows (indexes into `rows`) that run on in one Arrow batch.
    runs: Vec<Range<usize>>,
}

impl<'a> Sources<'a> {
    pub fn of(rows: &'a [&'a ArrowRow]) -> Self {
        let mut batches: Vec<&'a ArrowRows> = Vec::new();
        let mut batch_of = Vec::with_capacity(rows.len());
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut seen: HashMap<*const ArrowRows, usize> = HashMap::new();
        for (i, row) in rows.iter().enumerate() {
            let continues = i > 0 && Arc::ptr_eq(&rows[i - 1].rows, &row.rows) && rows[i - 1].index + 1 == row.index;
            match runs.last_mut() {
                Some(run) if continues => run.end = i + 1,
                _ => runs.push(i..i + 1),
            }
            // Most rows come from the previous row's batch: looked at first, the others by
            // address.
            let same = |batch: &usize| std::ptr::eq(batches[*batch], &*row.rows);
            let batch = match batch_of.last().copied().filter(same) {
                Some(batch) => batch,
                None => *seen.entry(Arc::as_ptr(&row.rows)).or_insert_with(|| {
                    batches.push(&row.rows);
                    batches.len() - 1
                }),
            };
            batch_of.push(batch);
        }
        Self { rows, batches, batch_of, runs }
    }

    /// The little-endian values of fixed-width column `column`, each `width` bytes, a null
    /// taking `default`. `Err((i, why))`: row `i` is null without a default, or not a
    /// number of that width.
    pub fn fixed(&self, column: usize, width: usize, default: Option<&[u8]>) -> Result<Vec<u8>, (usize, String)> {
        let numbers: Option<Vec<&[u8]>> = (self.batches.iter())
            .map(|batch| match &batch.column(column).values {
                ArrowValues::Fixed { bytes, width: got } if *got == width && batch.column(column).has_no_nulls() => {
                    Some(bytes.as_slice())
                }
                _ => None,
            })
            .collect();
        match numbers {
            Some(numbers) if self.runs.len() * RUN_ROWS <= self.rows.len() => Ok(self.copy_runs(&numbers, width)),
            Some(numbers) => Ok(match width {
                1 => self.copy_rows::<1>(&numbers),
                2 => self.copy_rows::<2>(&numbers),
                4 => self.copy_rows::<4>(&numbers),
                8 => self.copy_rows::<8>(&numbers),
                other => unreachable!("no fixed-width dtype of {other} bytes"),
            }),
            None => self.read_rows(column, width, default),
        }
    }

    /// Numbers without nulls, a run at a time.
    fn copy_runs(&self, numbers: &[&[u8]], width: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.rows.len() * width);
        for run in &self.runs {
            let start = self.rows[run.start].index;
            let values = numbers[self.batch_of[run.start]];
            out.extend_from_slice(&values[start * width..(start + run.len()) * width]);
        }
        out
    }

    /// Numbers without nulls, a row at a time.
    fn copy_rows<const N: usize>(&self, numbers: &[&[u8]]) -> Vec<u8> {
        let mut out = vec![0u8; self.rows.len() * N];
        let (out_values, _) = out.as_chunks_mut::<N>();
        for ((value, row), batch) in out_values.iter_mut().zip(self.rows).zip(&self.batch_of) {
            let (values, _) = numbers[*batch].as_chunks::<N>();
            *value = values[row.index];
        }
        out
    }

    /// Any column of fixed-width values (nulls, bools, dictionaries), value by value.
    fn read_rows(&self, column: usize, width: usize, default: Option<&[u8]>) -> Result<Vec<u8>, (usize, String)> {
        let mut value = Builder::Fixed { width, bytes: Vec::with_capacity(self.rows.len() * width) };
        for (i, row) in self.rows.iter().enumerate() {
            let arrow = row.column(column);
            if arrow.is_valid(row.index) {
                value.read_arrow(arrow, row.index).map_err(|message| (i, message))?;
            } else {
                let default =
                    default.ok_or_else(|| (i, "null, and the spec gives the column no default".to_owned()))?;
                let Builder::Fixed { bytes, .. } = &mut value else { unreachable!("made fixed") };
                bytes.extend_from_slice(default);
            }
        }
        let Builder::Fixed { bytes, .. } = value else { unreachable!("made fixed") };
        Ok(bytes)
    }
}
