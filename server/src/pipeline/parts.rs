//! A cluster's splits of columnar files: row groups (an Arrow IPC file's record batches),
//! not whole files. A job over a few
//! large files then spreads over its replicas, and a replica that dies leaves a row
//! group to read again, not a file. Each row group is a split of its own, unless the
//! files hold more than [`MOST_PARTS`] of them: then consecutive row groups of a file
//! are split together, as few to a split as keeps their number about that (parts never
//! span files, so many files of few row groups give more; the ledger's rows and leases
//! grow with the splits).
//!
//! Every replica cuts the same files the same way, from their footers alone.

use crate::source::columnar::{self, ColumnarFormat};
use crate::source::{DataFile, SourceError};

/// Splits an epoch at most, about (a file's last one may hold fewer row groups).
pub const MOST_PARTS: usize = 4096;

/// Footers read at once (objects: each is a round trip or two).
const FOOTER_THREADS: usize = 16;

/// The parts of `files` (of columnar format `format`), in file order: each file's row
/// groups as ranges of [`groups_per_part`] (a file with none: one empty part, so it is
/// still read, and done), each with its first row.
/// Blocking: reads the files' footers, [`FOOTER_THREADS`] at once.
pub fn parts_of(files: &[DataFile], format: ColumnarFormat) -> Result<Vec<DataFile>, SourceError> {
    let per_thread = files.len().div_ceil(FOOTER_THREADS).max(1);
    let read: Vec<Result<Vec<u64>, SourceError>> = std::thread::scope(|scope| {
        let starts_of = |file| columnar::unit_starts(file, format);
        let threads: Vec<_> = files
            .chunks(per_thread)
            .map(|files| scope.spawn(move || files.iter().map(starts_of).collect::<Vec<_>>()))
            .collect();
        threads.into_iter().flat_map(|thread| thread.join().expect("a footer's thread does not panic")).collect()
    });
    let starts = read.into_iter().collect::<Result<Vec<Vec<u64>>, SourceError>>()?;
    let per_part = groups_per_part(starts.iter().map(|starts| starts.len() - 1).sum());
    let mut parts = Vec::new();
    for (file, starts) in files.iter().zip(starts) {
        let units = starts.len() - 1;
        if units == 0 {
            parts.push(file.part(0..0, 0));
        }
        parts.extend((0..units).step_by(per_part).map(|start| {
            let end = units.min(start + per_part);
            file.part(start as u64..end as u64, starts[start])
        }));
    }
    Ok(parts)
}

/// Row groups to a part, for `groups` row groups in all.
pub fn groups_per_part(groups: usize) -> usize {
    groups.div_ceil(MOST_PARTS).max(1)
}

#[cfg(test)]
mod tests {
    use super::{MOST_PARTS, groups_per_part};

    #[test]
    fn row_groups_are_split_alone_until_there_are_too_many() {
        assert_eq!(groups_per_part(0), 1);
        assert_eq!(groups_per_part(32), 1);
        assert_eq!(groups_per_part(MOST_PARTS), 1);
        assert_eq!(groups_per_part(MOST_PARTS + 1), 2);
        assert_eq!(groups_per_part(10 * MOST_PARTS), 10);
    }
}
