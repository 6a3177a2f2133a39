//! An element's record keys: `Element.keys` (one string per record) or
//! `Element.key_table` (each file named once, then a file index and a number per record),
//! which is how the server sends the keys of records read from files: no string per record
//! to build, encode or decode. Clients turn the table into `keys` with [`expand`] before
//! handing an element on.

use crate::v1 as pb;

/// Records in `element` (its keys, in either form).
pub fn count(element: &pb::Element) -> usize {
    match &element.key_table {
        Some(table) if element.keys.is_empty() => table.file.len(),
        _ => element.keys.len(),
    }
}

/// A key table that does not describe its records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("element {seq}: bad key table: {reason}")]
pub struct KeyTableError {
    pub seq: i64,
    pub reason: String,
}

/// Replaces `element.key_table` with the `keys` it stands for.
pub fn expand(element: &mut pb::Element) -> Result<(), KeyTableError> {
    let Some(table) = element.key_table.take() else { return Ok(()) };
    let error = |reason: String| KeyTableError { seq: element.seq, reason };
    if !element.keys.is_empty() {
        return Err(error("the element has both keys and a key table".into()));
    }
    if table.file.len() != table.number.len() {
        return Err(error(format!("{} file indexes for {} numbers", table.file.len(), table.number.len())));
    }
    let mut keys = Vec::with_capacity(table.file.len());
    for (&file, &number) in table.file.iter().zip(&table.number) {
        let name = table
            .files
            .get(file as usize)
            .ok_or_else(|| error(format!("file index {file} with {} files", table.files.len())))?;
        keys.push(key(name, number));
    }
    element.keys = keys;
    Ok(())
}

/// `<file>:<number>`, one allocation of the right size.
pub fn key(file: &str, number: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(number);
    let mut key = String::with_capacity(file.len() + 1 + digits.len());
    key.push_str(file);
    key.push(':');
    key.push_str(digits);
    key
}

/// Rows `range` of a key table (every file kept, so indexes stay valid).
pub fn table_rows(table: &pb::KeyTable, range: std::ops::Range<usize>) -> pb::KeyTable {
    pb::KeyTable {
        files: table.files.clone(),
        file: table.file[range.clone()].to_vec(),
        number: table.number[range].to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_table(files: &[&str], rows: &[(u32, u64)]) -> pb::Element {
        pb::Element {
            seq: 3,
            key_table: Some(pb::KeyTable {
                files: files.iter().map(|f| f.to_string()).collect(),
                file: rows.iter().map(|r| r.0).collect(),
                number: rows.iter().map(|r| r.1).collect(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_table_expands_to_the_keys_it_stands_for() {
        let mut element = with_table(&["a/x.tfrecord", "b.csv"], &[(0, 0), (1, 12), (0, u64::MAX)]);
        assert_eq!(count(&element), 3);
        expand(&mut element).unwrap();
        assert_eq!(element.keys, ["a/x.tfrecord:0", "b.csv:12", format!("a/x.tfrecord:{}", u64::MAX).as_str()]);
        assert_eq!(element.key_table, None);
        assert_eq!(count(&element), 3);
        // Keys as strings are left alone.
        expand(&mut element).unwrap();
        assert_eq!(element.keys.len(), 3);
    }

    #[test]
    fn a_table_that_does_not_fit_its_records_is_an_error() {
        let mut bad_index = with_table(&["a"], &[(1, 0)]);
        assert!(expand(&mut bad_index).unwrap_err().reason.contains("file index 1"));
        let mut uneven = with_table(&["a"], &[(0, 0)]);
        uneven.key_table.as_mut().unwrap().number.push(1);
        assert!(expand(&mut uneven).is_err());
        let mut both = with_table(&["a"], &[(0, 0)]);
        both.keys.push("a:0".into());
        assert!(expand(&mut both).is_err());
    }

    #[test]
    fn keys_are_file_colon_number() {
        for number in [0, 7, 10, 12345, u64::MAX] {
            assert_eq!(key("f.txt", number), format!("f.txt:{number}"));
        }
    }
}
