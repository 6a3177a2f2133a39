//! Where a mixture's batch is put back into the mixture's order: its components' decoded
//! records (`mix_decode.rs`) gathered row by row into one batch, and its keys.

use std::sync::Arc;

use bytes::Bytes;

use super::Reader;
use crate::decode::{Dense, Tensor, Values};
use crate::element::Keys;
use crate::error::{Result, ServeError};
use crate::source::Record;

/// Decoded features by name.
pub(super) type Features = Vec<(String, Tensor)>;

/// The features of a batched mixture, in their order (the first component's decoder's),
/// and where each component's decoder puts each of them, as its signature says (checked
/// against every decoded batch).
pub(super) struct Layout {
    pub(super) names: Vec<String>,
    positions: Vec<Vec<usize>>,
}

impl Layout {
    pub(super) fn of(components: &[Reader]) -> Self {
        let signature = |c: &Reader| -> Vec<String> {
            c.spec.decoder.signature().unwrap_or_default().into_iter().map(|(name, _)| name).collect()
        };
        let names = components.first().map(signature).unwrap_or_default();
        let positions = components
            .iter()
            .map(|c| {
                let theirs = signature(c);
                names.iter().map(|name| theirs.iter().position(|n| n == name).unwrap_or(usize::MAX)).collect()
            })
            .collect();
        Self { names, positions }
    }
}

/// A decoded batch of one component's records, its features in the layout's order.
pub(super) struct Decoded {
    features: Features,
    /// For each of the layout's names, its index in `features` (`usize::MAX`: missing).
    order: Vec<usize>,
}

impl Decoded {
    pub(super) fn new(features: Features, layout: &Layout, component: usize) -> Self {
        let expected = &layout.positions[component];
        let order = layout
            .names
            .iter()
            .enumerate()
            .map(|(j, name)| match features.get(expected[j]) {
                Some((n, _)) if n == name => expected[j],
                _ => features.iter().position(|(n, _)| n == name).unwrap_or(usize::MAX),
            })
            .collect();
        Self { features, order }
    }

    /// The layout's `j`th feature.
    fn get(&self, j: usize) -> Option<&Tensor> {
        self.features.get(self.order[j]).map(|(_, tensor)| tensor)
    }
}

/// The batch in the mixture's order: row `i` of each feature (in the layout's order) is
/// row `sources[i].1` of `groups[sources[i].0]`, every group being used. Features are
/// dense (the spec checks it) and of one dtype and row shape in every group (else
/// TensorFlow's `batch` would fail too).
pub(super) fn gather(layout: &Layout, groups: &[&Decoded], sources: &[(usize, usize)]) -> Result<Features> {
    let runs: Vec<(usize, std::ops::Range<usize>)> = runs(sources).collect();
    let mut out = Vec::with_capacity(layout.names.len());
    for (j, name) in layout.names.iter().enumerate() {
        let mut parts: Vec<&Dense> = Vec::with_capacity(groups.len());
        for group in groups {
            match group.get(j) {
                Some(Tensor::Dense(dense)) => parts.push(dense),
                _ => return Err(stack_error(name)),
            }
        }
        let sample = *parts.first().ok_or_else(|| stack_error(name))?;
        let inner = &sample.shape[1..];
        let per_row: usize = inner.iter().product();
        if parts.iter().any(|d| d.dtype != sample.dtype || &d.shape[1..] != inner) {
            return Err(stack_error(name));
        }
        let mut shape = vec![sources.len()];
        shape.extend_from_slice(inner);
        let values = match &sample.values {
            Values::Bytes(_) => {
                let row_bytes = per_row * sample.dtype.size().unwrap_or(1);
                let mut columns: Vec<&[u8]> = Vec::with_capacity(parts.len());
                for part in &parts {
                    match &part.values {
                        Values::Bytes(bytes) => columns.push(bytes),
                        Values::Strings(_) => return Err(stack_error(name)),
                    }
                }
                Values::Bytes(Bytes::from(gather_rows(&columns, sources, &runs, row_bytes)))
            }
            Values::Strings(_) => {
                let mut all = Vec::with_capacity(per_row * sources.len());
                for (g, rows) in runs.iter().cloned() {
                    let Values::Strings(strings) = &parts[g].values else {
                        return Err(stack_error(name));
                    };
                    all.extend_from_slice(&strings[rows.start * per_row..rows.end * per_row]);
                }
                Values::Strings(all)
            }
        };
        out.push((name.clone(), Tensor::Dense(Dense { dtype: sample.dtype, shape, values })));
    }
    Ok(out)
}

/// Rows of `row_bytes` bytes, row `i` being row `sources[i].1` of group `sources[i].0`.
/// Short runs (components alternating) are copied row by row at a fixed width, which
/// compiles to a load and a store; long ones run by run.
fn gather_rows(
    groups: &[&[u8]],
    sources: &[(usize, usize)],
    runs: &[(usize, std::ops::Range<usize>)],
    row_bytes: usize,
) -> Vec<u8> {
    fn fixed<const N: usize>(groups: &[&[u8]], sources: &[(usize, usize)]) -> Vec<u8> {
        let mut out = vec![0u8; N * sources.len()];
        for (row, &(g, r)) in out.chunks_exact_mut(N).zip(sources) {
            row.copy_from_slice(&groups[g][r * N..(r + 1) * N]);
        }
        out
    }
    let short_runs = runs.len() * 4 > sources.len();
    match row_bytes {
        1 if short_runs => fixed::<1>(groups, sources),
        2 if short_runs => fixed::<2>(groups, sources),
        4 if short_runs => fixed::<4>(groups, sources),
        8 if short_runs => fixed::<8>(groups, sources),
        _ => {
            let mut out = Vec::with_capacity(row_bytes * sources.len());
            for (g, rows) in runs {
                out.extend_from_slice(&groups[*g][rows.start * row_bytes..rows.end * row_bytes]);
            }
            out
        }
    }
}

/// `sources` as runs of consecutive rows of one group: `(group, rows)`, copied at once.
fn runs(sources: &[(usize, usize)]) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let &(group, first) = sources.get(at)?;
        let mut end = first + 1;
        at += 1;
        while sources.get(at) == Some(&(group, end)) {
            end += 1;
            at += 1;
        }
        Some((group, first..end))
    })
}

fn stack_error(name: &str) -> ServeError {
    ServeError::Decode(format!(
        "the records of one batch of the mixture differ in the shape of {name} (TensorFlow's batch needs equal shapes)"
    ))
}

/// The records' keys, `<component>/<file>:<n>`, as one table (each prefixed name made once).
pub(super) fn mixed_keys<'a>(records: impl ExactSizeIterator<Item = (usize, &'a Record)>) -> Keys {
    let mut names: Vec<(usize, Arc<str>, Arc<str>)> = Vec::new();
    let mut files: Vec<Arc<str>> = Vec::new();
    let (mut file, mut number) = (Vec::with_capacity(records.len()), Vec::with_capacity(records.len()));
    for (component, record) in records {
        let at =
            names.iter().position(|(c, f, _)| *c == component && (Arc::ptr_eq(f, &record.file) || *f == record.file));
        let index = match at {
            Some(at) => at,
            None => {
                let prefixed: Arc<str> = Arc::from(format!("{component}/{}", record.file).as_str());
                names.push((component, record.file.clone(), prefixed.clone()));
                files.push(prefixed);
                names.len() - 1
            }
        };
        file.push(index as u32);
        number.push(record.key);
    }
    Keys::Table { files, file, number }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_gathered_in_the_mixtures_order_at_every_width() {
        for row_bytes in [1, 2, 3, 4, 8, 12] {
            // Two groups of 12 rows; no two rows of either group are alike.
            let rows = |g: usize| -> Vec<u8> {
                (0..12).flat_map(|r| (0..row_bytes).map(move |b| (g * 131 + r * 17 + b * 3) as u8)).collect()
            };
            let (a, b) = (rows(0), rows(1));
            let groups: Vec<&[u8]> = vec![&a, &b];
            // Components alternating: 24 runs of one row (copied row by row at widths 1, 2,
            // 4 and 8).
            let alternating: Vec<(usize, usize)> = (0..12).flat_map(|r| [(0, r), (1, r)]).collect();
            // Long runs: 4 runs over 22 rows (copied run by run).
            let long: Vec<(usize, usize)> =
                (0..10).map(|r| (0, r)).chain((0..10).map(|r| (1, r))).chain([(0, 10), (1, 10)]).collect();
            for sources in [&alternating, &long] {
                let runs: Vec<_> = runs(sources).collect();
                let expected: Vec<u8> =
                    sources.iter().flat_map(|&(g, r)| groups[g][r * row_bytes..(r + 1) * row_bytes].to_vec()).collect();
                assert_eq!(gather_rows(&groups, sources, &runs, row_bytes), expected, "{row_bytes} bytes a row");
            }
            assert!(runs(&alternating).count() * 4 > alternating.len(), "the row-by-row path");
            assert!(runs(&long).count() * 4 <= long.len(), "the run-by-run path");
        }
    }
}
