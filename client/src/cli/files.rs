//! The file tools of `readerctl`: `inspect` (print a file's records), `convert` (CSV →
//! TFRecord of Examples) and `gen-demo` (the benchmark workloads and their specs). Each
//! file or folder argument may be an object-store URL ([`remote`]): an object inspected or
//! converted is read whole into memory; an output object is written to a temporary file
//! or folder first, then uploaded.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use readerd_client::inspect::FileFormat;

use super::remote;

/// `readerctl inspect`: one JSON line per record of `file` (as an Example when it is a
/// TFRecord file and not `raw`).
pub async fn inspect(
    file: &Path,
    format: Option<FileFormat>,
    record_bytes: usize,
    limit: Option<u64>,
    raw: bool,
) -> anyhow::Result<ExitCode> {
    use readerd_client::inspect::{for_each_record, for_each_record_in, record_json};
    let format = format.unwrap_or_else(|| FileFormat::of(file));
    let as_example = !raw && format == FileFormat::Tfrecord;
    let fetched = match remote::url_of(file) {
        Some(url) => Some(remote::read_all(url).await?),
        None => None,
    };
    if format == FileFormat::Parquet {
        let name = file_name(file);
        let described = match fetched {
            Some(bytes) => readerd_client::inspect_parquet::describe(&name, bytes),
            None => std::fs::File::open(file)
                .map_err(parquet::errors::ParquetError::from)
                .and_then(|opened| readerd_client::inspect_parquet::describe(&name, opened)),
        };
        let described = described.map_err(|err| anyhow::anyhow!("{}: {err}", remote::shown(file)))?;
        println!("{described}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut stdout = std::io::stdout().lock();
    let mut each = |key: String, record: Vec<u8>| writeln!(stdout, "{}", record_json(&key, &record, as_example));
    let done = match &fetched {
        Some(bytes) => {
            let name = file_name(file);
            for_each_record_in(&name, bytes.as_ref(), bytes.len() as u64, format, record_bytes, limit, &mut each)
        }
        None => for_each_record(file, format, record_bytes, limit, &mut each),
    };
    done.map_err(|err| anyhow::anyhow!("{}: {err}", remote::shown(file)))?;
    Ok(ExitCode::SUCCESS)
}

/// The last part of a path or URL (the records' keys are named after it).
fn file_name(file: &Path) -> String {
    file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// `readerctl convert`: CSV → TFRecord of Examples, Parquet ⇄ TFRecord (by the `.parquet`
/// extension of the input or output), and the spec that reads the output.
pub async fn convert(
    input: &Path,
    output: &Path,
    schema: &str,
    spec_output: Option<&Path>,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    use readerd_client::{convert, convert_parquet};
    let given = convert::parse_schema(schema)?;
    // Refused before anything is fetched or the output created (an existing output stays).
    let is_parquet = |path: &Path| FileFormat::of(path) == FileFormat::Parquet;
    if (is_parquet(input) || is_parquet(output)) && !given.is_empty() {
        anyhow::bail!("--schema is for CSV input: Parquet and TFRecord carry their types");
    }
    if is_parquet(output) && FileFormat::of(input) != FileFormat::Tfrecord {
        anyhow::bail!("{}: a Parquet output is written from a TFRecord file of Examples", remote::shown(input));
    }
    let fetched = match remote::url_of(input) {
        Some(url) => Some(remote::read_all(url).await?),
        None => None,
    };
    let output_url = remote::url_of(output);
    let staged = output_url.map(|_| tempfile::tempdir()).transpose()?;
    let written: PathBuf = staged.as_ref().map_or_else(|| output.to_path_buf(), |dir| dir.path().join("output"));
    let created = std::fs::File::create(&written).map_err(|err| anyhow::anyhow!("{}: {err}", written.display()))?;
    let input_bytes = || -> anyhow::Result<bytes::Bytes> {
        match &fetched {
            Some(bytes) => Ok(bytes.clone()),
            None => Ok(std::fs::read(input).map_err(|err| anyhow::anyhow!("{}: {err}", input.display()))?.into()),
        }
    };
    let failed = |err: String| anyhow::anyhow!("{}: {err}", remote::shown(input));
    let mut progress = readerd_client::progress::Progress::new("records", !quiet);
    let (records, spec, summary) = if is_parquet(input) {
        let file = std::io::BufWriter::new(created);
        let converted =
            convert_parquet::parquet_to_tfrecord(input_bytes()?, file, &file_name(output), &mut |n| progress.set(n))
                .map_err(failed)?;
        (converted.records, converted.spec, "Parquet to TFRecord".to_owned())
    } else if is_parquet(output) {
        let bytes = input_bytes()?;
        let len = bytes.len() as u64;
        let mut reader = readerd_client::tfrecord::TfRecordReader::new(std::io::Cursor::new(bytes), len);
        let records = std::iter::from_fn(|| reader.next_record().transpose()).map(|r| r.map(|(_, record)| record));
        let converted = convert_parquet::tfrecord_to_parquet(records, created, &file_name(output)).map_err(failed)?;
        (converted.records, converted.spec, "TFRecord to Parquet".to_owned())
    } else {
        let file = std::io::BufWriter::new(created);
        let reopen = || -> std::io::Result<Box<dyn Read + '_>> {
            match &fetched {
                Some(bytes) => Ok(Box::new(bytes.as_ref())),
                None => Ok(Box::new(std::fs::File::open(input)?)),
            }
        };
        let converted = convert::csv_to_tfrecord(reopen, file, &given, &file_name(output), &mut |n| progress.set(n))
            .map_err(|err| failed(err.to_string()))?;
        let columns: Vec<String> = converted.columns.iter().map(|(name, kind)| format!("{name}:{kind:?}")).collect();
        (converted.records, converted.spec, format!("columns {}", columns.join(",")))
    };
    progress.finish();
    if let Some(url) = output_url {
        remote::upload_file(&written, url).await?;
    }
    eprintln!("{records} records, {summary}");
    if let Some(path) = spec_output {
        let text = serde_json::to_string_pretty(&spec)? + "\n";
        match remote::url_of(path) {
            Some(url) => remote::write(url, text.into()).await?,
            None => std::fs::write(path, text)?,
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What the specs `gen-demo` writes say, and whether it writes only them.
pub struct SpecOptions {
    pub batch_size: u32,
    pub epochs: i32,
    pub specs_only: bool,
}

/// `readerctl gen-demo`: the benchmark workloads and their specs under `out`, a folder
/// or a URL prefix (written to a temporary folder, then uploaded).
pub async fn gen_demo(
    out: &Path,
    workloads: &[String],
    sizes: &readerd_client::demo::Sizes,
    specs: &SpecOptions,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    use readerd_client::demo;
    if let Some(unknown) = workloads.iter().find(|w| !demo::WORKLOADS.contains(&w.as_str())) {
        anyhow::bail!("unknown workload {unknown:?}; workloads: {}", demo::WORKLOADS.join(", "));
    }
    let spec_names: Vec<String> = match remote::url_of(out) {
        None => {
            generate(out, workloads, sizes, specs, quiet)?;
            workloads.iter().map(|w| out.join("specs").join(format!("{w}.json")).display().to_string()).collect()
        }
        Some(url) => {
            let staged = tempfile::tempdir()?;
            generate(staged.path(), workloads, sizes, specs, quiet)?;
            let (files, bytes) = remote::upload_dir(staged.path(), url).await?;
            let url = remote::redact(url.trim_end_matches('/'));
            if !quiet {
                eprintln!("uploaded {files} files ({bytes} bytes) to {url}");
            }
            workloads.iter().map(|w| format!("{url}/specs/{w}.json")).collect()
        }
    };
    if !quiet {
        for (workload, spec) in workloads.iter().zip(spec_names) {
            eprintln!("wrote {workload}; spec {spec}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the workloads and their specs into the folder `out`.
fn generate(
    out: &Path,
    workloads: &[String],
    sizes: &readerd_client::demo::Sizes,
    specs: &SpecOptions,
    quiet: bool,
) -> anyhow::Result<()> {
    use readerd_client::demo;
    std::fs::create_dir_all(out.join("specs"))?;
    let wants = |name: &str| workloads.iter().any(|w| w == name);
    if wants("images") && !specs.specs_only {
        let mut progress = readerd_client::progress::Progress::new("images", !quiet);
        demo::write_images(out, sizes, &mut |n| progress.set(n))?;
        progress.finish();
    }
    let formats = demo::TabularFormats {
        tfrecord: wants("tabular"),
        csv: wants("tabular_csv"),
        parquet: wants("tabular_parquet"),
    };
    if (formats.tfrecord || formats.csv || formats.parquet) && !specs.specs_only {
        let mut progress = readerd_client::progress::Progress::new("rows", !quiet);
        demo::write_tabular(out, sizes, formats, &mut |n| progress.set(n))?;
        progress.finish();
    }
    let mixed = demo::MIXED_WORKLOADS.iter().filter(|(_, parts)| parts.iter().all(|part| wants(part)));
    for workload in workloads.iter().map(String::as_str).chain(mixed.map(|(name, _)| *name)) {
        let spec = demo::spec(workload, specs.batch_size, specs.epochs).expect("checked above");
        let path = out.join("specs").join(format!("{workload}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&spec)? + "\n")?;
    }
    Ok(())
}
