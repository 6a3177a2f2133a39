//! Typing a columnar source's columns from its first file's footer, once, when a reader
//! opens: the `columns` decoder learns each column's type, and the source which columns
//! each row holds; the spec's transforms are checked against them. Every other file is
//! checked against them as it opens.

use std::sync::Arc;

use crate::decode::Decoder;
use crate::error::{Result, ServeError};
use crate::source::columnar::{RecordsOf, file_schema};
use crate::source::{DataFile, SourceFormat};
use crate::spec::ReaderSpec;

pub(super) fn type_columns_from_first_file(spec: &mut ReaderSpec, files: &[DataFile]) -> Result<()> {
    let (SourceFormat::Columnar(config), Decoder::Columns(decoder)) = (&mut spec.source.format, spec.decoder.as_ref())
    else {
        return Ok(());
    };
    if decoder.is_resolved() {
        return Ok(());
    }
    let Some(first) = files.first() else { return Ok(()) };
    let schema = file_schema(first, config.format)?;
    let resolved =
        decoder.resolve(&schema).map_err(|reason| ServeError::InvalidSpec(format!("{}: {reason}", first.name)))?;
    config.records =
        RecordsOf::Rows(resolved.columns().iter().map(|column| (column.name.clone(), column.ty.clone())).collect());
    spec.decoder = Arc::new(Decoder::Columns(resolved));
    // Its transforms could not be checked against columns of unknown types: now they are.
    spec.transforms.output(spec.decoder.output()).map_err(ServeError::InvalidSpec)?;
    Ok(())
}
