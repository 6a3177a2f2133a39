//! The spec of a columnar source (`format: PARQUET` / `ARROW_IPC`): what a record is
//! (a row of the `columns` decoder's columns, or `source.column`'s values for another
//! decoder) and the `columns` decoder (DESIGN.md, "Columnar files").

use bytes::Bytes;
use readerd_proto::v1 as pb;

use super::{invalid, shape_of};
use crate::decode::Decoder;
use crate::decode::columnar::{ColumnRequest, ColumnarDecoder, DefaultValue};
use crate::error::Result;
use crate::source::SourceFormat;
use crate::source::columnar::{ColumnarConfig, ColumnarFormat, RecordsOf};

/// The source format and decoder of a columnar `source`. `other_decoder` makes a decoder
/// that is not `columns` (for `source.column`'s values).
pub(super) fn columnar_source(
    source: &pb::Source,
    decoder: Option<&pb::Decoder>,
    other_decoder: impl FnOnce(Option<&pb::Decoder>) -> Result<Decoder>,
) -> Result<(SourceFormat, Decoder)> {
    let format = match source.format() {
        pb::Format::Parquet => ColumnarFormat::Parquet,
        pb::Format::ArrowIpc => ColumnarFormat::ArrowIpc,
        other => unreachable!("columnar_source of {other:?}"),
    };
    let name = format.name();
    if !matches!(source.compression(), pb::Compression::None | pb::Compression::Auto) {
        return Err(invalid(format!("format {name} takes no source.compression: its files compress their own pages")));
    }
    if source.header || source.skip_header_lines != 0 || source.record_bytes != 0 || source.header_bytes != 0 {
        return Err(invalid(format!("format {name} takes no header, skipHeaderLines or record sizes")));
    }
    let columns = match decoder.and_then(|d| d.kind.as_ref()) {
        Some(pb::decoder::Kind::Columns(columns)) => Some(columns),
        None => None,
        Some(_) => {
            if source.column.is_empty() {
                return Err(invalid(format!(
                    "format {name} reads rows with the columns decoder; for another decoder, name the string or binary column that holds the records in source.column"
                )));
            }
            let records = RecordsOf::Column(source.column.clone());
            return Ok((SourceFormat::Columnar(ColumnarConfig { format, records }), other_decoder(decoder)?));
        }
    };
    if !source.column.is_empty() {
        return Err(invalid(
            "source.column is for a decoder other than columns (the columns decoder reads every column it names)",
        ));
    }
    let requests = match columns {
        None => None,
        Some(columns) if columns.columns.is_empty() => None,
        Some(columns) => Some(columns.columns.iter().map(request_of).collect::<Result<Vec<_>>>()?),
    };
    if let Some(name) = requests.as_ref().and_then(|r| super::repeated_name(r.iter().map(|c| c.name.as_str()))) {
        return Err(invalid(format!("decoder.columns: the column {name} is named twice")));
    }
    let records = RecordsOf::Rows(Vec::new());
    Ok((SourceFormat::Columnar(ColumnarConfig { format, records }), Decoder::Columns(ColumnarDecoder::new(requests))))
}

fn request_of(column: &pb::Column) -> Result<ColumnRequest> {
    if column.name.is_empty() {
        return Err(invalid("decoder.columns: a column without a name"));
    }
    let field = format!("decoder.columns: column {}: shape", column.name);
    let shape = (!column.shape.is_empty()).then(|| shape_of(&column.shape, &field)).transpose()?;
    let default = column.default.as_ref().map(|value| DefaultValue {
        int64_values: value.int64_values.clone(),
        float_values: value.float_values.clone(),
        bytes_values: value.bytes_values.iter().map(|b| Bytes::copy_from_slice(b)).collect(),
        bool_values: value.bool_values.clone(),
    });
    Ok(ColumnRequest { name: column.name.clone(), shape, default })
}
