//! A cluster's splits of columnar files: row groups (an Arrow IPC file's record batches),
//! not whole files. A job over a few
//! large files then spreads over its replicas, and a replica that dies leaves a row
//! group to read again, not a file. Each row group is a split of its own, unless the
//! files hold more than [`MOST_PARTS`] of them: then consecutive row groups of a file
//! are split together, as few to a split as keeps their number under it (the ledger's
//! rows and leases grow with the splits).
//!
//! Every replica cuts the same files the same way, from their footers alone.

use crate::source::columnar::{self, ColumnarFormat};
use crate::source::{DataFile, SourceError};

/// Splits an epoch at most, about (a file's last one may hold fewer row groups).
pub const MOST_PARTS: usize = 4096;

/// Footers read at once (objects: each is a round trip or two).
const FOOTER_THREADS: usize = 16;

/// The parts of `files` (of columnar format `format`), in file order: each file's row groups as ranges of
/// [`groups_per_part`] (a file with none: one empty part, so it is still read, and done).
/// Blocking: reads the files' footers, [`FOOTER_THREADS`] at once.
pub fn parts_of(files: &[DataFile], format: ColumnarFormat) -> Result<Vec<DataFile>, SourceError> {
    let per_thread = files.len().div_ceil(FOOTER_THREADS).max(1);
    let read: Vec<Result<usize, SourceError>> = std::thread::scope(|scope| {
        let threads: Vec<_> = files
            .chunks(per_thread)
            .map(|files| {
                scope.spawn(move || files.iter().map(|file| columnar::units(file, format)).collect::<Vec<_>>())
            })
            .collect();
        threads.into_iter().flat_map(|thread| thread.join().expect("a footer's thread does not panic")).collect()
    });
    let groups = read.into_iter().collect::<Result<Vec<usize>, SourceError>>()?;
    let per_part = groups_per_part(groups.iter().sum());
    let mut parts = Vec::new();
    for (file, groups) in files.iter().zip(groups) {
        let groups = groups as u64;
        if groups == 0 {
            parts.push(file.part(0..0));
        }
        parts.extend((0..groups).step_by(per_part).map(|start| file.part(start..groups.min(start + per_part as u64))));
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
