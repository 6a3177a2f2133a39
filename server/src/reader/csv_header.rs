//! Naming CSV columns from the files' header lines (`format: CSV`, `header: true`), once,
//! when a reader opens.

use std::sync::Arc;

use bytes::Bytes;

use crate::decode::Decoder;
use crate::error::{Result, ServeError};
use crate::format::FormatConfig;
use crate::source::{DataFile, FileRecords, SourceFormat};
use crate::spec::ReaderSpec;

/// With `format: CSV` and `header: true`, each file's first record names the columns the
/// spec leaves unnamed. The files must agree.
pub(super) fn name_csv_columns_from_headers(spec: &mut ReaderSpec, files: &[DataFile]) -> Result<()> {
    let (SourceFormat::Framed(FormatConfig::Csv { header: true, .. }), Decoder::Csv { config, dialect, names }) =
        (&spec.source.format, spec.decoder.as_ref())
    else {
        return Ok(());
    };
    let mut header_names: Option<(Vec<String>, &str)> = None;
    for file in files {
        let mut record_file = FileRecords::open(file, &spec.source, None)?;
        record_file.next_record()?;
        let Some(header) = record_file.header() else { continue };
        let these = config
            .header_names(&Bytes::copy_from_slice(header))
            .map_err(|err| ServeError::InvalidSpec(format!("{}: {}", file.name, err.message)))?;
        match &header_names {
            Some((first, first_file)) if *first != these => {
                return Err(ServeError::InvalidSpec(format!(
                    "the CSV headers of {first_file} ({}) and {} ({}) name the columns differently",
                    first.join(","),
                    file.name,
                    these.join(",")
                )));
            }
            Some(_) => {}
            None => header_names = Some((these, &file.name)),
        }
    }
    let Some((header_names, _)) = header_names else { return Ok(()) };
    let given: Vec<&str> = match spec.proto.decoder.as_ref().and_then(|d| d.kind.as_ref()) {
        Some(readerd_proto::v1::decoder::Kind::Csv(csv)) => csv.columns.iter().map(|c| c.name.as_str()).collect(),
        _ => Vec::new(),
    };
    let named: Vec<String> = names
        .iter()
        .zip(header_names)
        .enumerate()
        .map(|(i, (fallback, from_header))| match given.get(i) {
            Some(name) if !name.is_empty() => fallback.clone(),
            _ => from_header,
        })
        .collect();
    if crate::spec::repeated_name(named.iter().map(String::as_str)).is_some() {
        return Err(ServeError::InvalidSpec(format!("CSV column names repeat: {}", named.join(","))));
    }
    spec.decoder = Arc::new(Decoder::Csv { config: config.clone(), dialect: *dialect, names: named });
    Ok(())
}
