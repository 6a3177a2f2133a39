//! A mixture's batch: records of several components in the mixture's order, decoded
//! component by component as batches (each with its own decoder, as fast as reading the
//! component alone) and gathered back into the mixture's order.

use std::sync::Arc;

use bytes::Bytes;

use super::Reader;
use super::in_component;
use crate::decode::{Dense, Tensor, Values};
use crate::element::{Element, Keys};
use crate::error::{Result, ServeError};
use crate::source::Record;

/// `(component, record)` in the mixture's order, decoded into one element: a batch
/// (`batched`) or the one record as it is. Undecodable records fail the batch, or with the
/// component's `onError: SKIP` are dropped and counted; `None` when none is left.
pub(super) fn decode_mixed(
    components: &[Reader],
    taken: Vec<(usize, Record)>,
    batched: bool,
) -> Result<Option<Element>> {
    let keys = mixed_keys(&taken);
    let mut groups: Vec<Group> = (0..components.len()).map(|_| Group::default()).collect();
    for (row, (component, record)) in taken.into_iter().enumerate() {
        let group = &mut groups[component];
        group.rows.push(row);
        group.values.push(record.value);
    }
    // Which group and row of its decoded batch each kept row of the mixture comes from.
    let mut sources: Vec<Option<(usize, usize)>> = vec![None; keys.len()];
    let mut decoded: Vec<Features> = Vec::with_capacity(groups.len());
    for (c, group) in groups.iter().enumerate() {
        if group.rows.is_empty() {
            decoded.push(Vec::new());
            continue;
        }
        let (features, kept) = decode_group(&components[c], c, group, &keys, batched)?;
        for (n, &at) in kept.iter().enumerate() {
            sources[group.rows[at]] = Some((c, n));
        }
        decoded.push(features);
    }
    let kept: Vec<usize> = (0..sources.len()).filter(|&row| sources[row].is_some()).collect();
    if kept.is_empty() {
        return Ok(None);
    }
    let sources: Vec<(usize, usize)> = sources.into_iter().flatten().collect();
    let keys = if kept.len() == keys.len() { keys } else { keys.select(&kept) };
    let features = if batched {
        gather(&decoded, &sources)?
    } else {
        decoded.into_iter().find(|features| !features.is_empty()).unwrap_or_default()
    };
    Ok(Some(Element { index: 0, keys, features, records: Vec::new() }))
}

/// Decoded features by name.
type Features = Vec<(String, Tensor)>;

/// One component's records of a batch: their rows in the mixture and their values.
#[derive(Default)]
struct Group {
    rows: Vec<usize>,
    values: Vec<Bytes>,
}

/// A group decoded by its component's decoder (`Reader::decode_values`, which drops and
/// counts undecodable records with the component's `onError: SKIP`), and which of its
/// records were kept. Errors name the component.
fn decode_group(
    component: &Reader,
    index: usize,
    group: &Group,
    keys: &Keys,
    batched: bool,
) -> Result<(Features, Vec<usize>)> {
    let key_strings = || keys.select(&group.rows).to_strings();
    let decoded =
        component.decode_values(&group.values, &key_strings, batched).map_err(|err| in_component(index, err))?;
    Ok(decoded.unwrap_or_default())
}

/// The batch in the mixture's order: row `i` of each feature is row `sources[i].1` of
/// group `sources[i].0`'s decoded batch. Features are dense (the spec checks it) and of one
/// dtype and row shape in every group (else TensorFlow's `batch` would fail too).
fn gather(decoded: &[Features], sources: &[(usize, usize)]) -> Result<Features> {
    let first = decoded.iter().find(|features| !features.is_empty()).expect("a decoded group");
    // Each group's features by name, looked up once per batch (decoders may order them
    // differently), and the groups the batch uses.
    let by_name: Vec<std::collections::HashMap<&str, &Tensor>> = decoded
        .iter()
        .map(|features| features.iter().map(|(name, tensor)| (name.as_str(), tensor)).collect())
        .collect();
    let mut used = vec![false; decoded.len()];
    sources.iter().for_each(|&(g, _)| used[g] = true);
    let runs: Vec<(usize, std::ops::Range<usize>)> = runs(sources).collect();
    let mut out = Vec::with_capacity(first.len());
    for (name, _) in first {
        let parts: Vec<Option<&Dense>> = by_name
            .iter()
            .map(|features| match features.get(name.as_str()) {
                Some(Tensor::Dense(dense)) => Some(dense),
                _ => None,
            })
            .collect();
        let sample = parts.iter().flatten().next().ok_or_else(|| stack_error(name))?;
        let inner = &sample.shape[1..];
        let per_row: usize = inner.iter().product();
        let differs = |d: &Dense| d.dtype != sample.dtype || &d.shape[1..] != inner;
        if (0..parts.len()).any(|g| used[g] && parts[g].is_none_or(differs)) {
            return Err(stack_error(name));
        }
        let mut shape = vec![sources.len()];
        shape.extend_from_slice(inner);
        let values = match &sample.values {
            Values::Bytes(_) => {
                let row_bytes = per_row * sample.dtype.size().unwrap_or(1);
                let mut groups: Vec<&[u8]> = Vec::with_capacity(parts.len());
                for part in &parts {
                    match part.map(|dense| &dense.values) {
                        Some(Values::Bytes(bytes)) => groups.push(bytes),
                        None => groups.push(&[]),
                        Some(Values::Strings(_)) => return Err(stack_error(name)),
                    }
                }
                Values::Bytes(Bytes::from(gather_rows(&groups, sources, &runs, row_bytes)))
            }
            Values::Strings(_) => {
                let mut all = Vec::with_capacity(per_row * sources.len());
                for (g, rows) in runs.iter().cloned() {
                    let Values::Strings(strings) = &parts[g].expect("checked").values else {
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
fn mixed_keys(taken: &[(usize, Record)]) -> Keys {
    let mut names: Vec<(usize, Arc<str>, Arc<str>)> = Vec::new();
    let mut files: Vec<Arc<str>> = Vec::new();
    let (mut file, mut number) = (Vec::with_capacity(taken.len()), Vec::with_capacity(taken.len()));
    for (component, record) in taken {
        let at =
            names.iter().position(|(c, f, _)| c == component && (Arc::ptr_eq(f, &record.file) || *f == record.file));
        let index = match at {
            Some(at) => at,
            None => {
                let prefixed: Arc<str> = Arc::from(format!("{component}/{}", record.file).as_str());
                names.push((*component, record.file.clone(), prefixed.clone()));
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
