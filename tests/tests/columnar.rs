//! Parquet files end to end (`format: PARQUET`): exact resume after SIGKILL mid row group
//! from local files and from S3 (moto), bad files answered with a status naming the file,
//! row group and column while the server keeps serving, a footer's row-count claim never
//! allocated, and 3 replicas over 8 files of 4 row groups (a split each) delivering every
//! row exactly once per epoch through a replica's SIGKILL; an Arrow IPC file from S3 read
//! with its footer read once per opening, and a Parquet row group's column chunks from S3 in
//! one GET. Files are written by pyarrow.

use std::path::Path;

use readerd_tests::postgres::Database;
use readerd_tests::s3::S3Server;
use readerd_tests::shared_reads::{
    lines_printed, read_shared, spawn_consumers, wait_for_consumers, wait_until_printed,
};
use readerd_tests::{ServerBuilder, ServerProcess, jsonl, readerctl, write_spec};
use serde_json::{Value, json};

/// Writes `files` Parquet files `part-F.parquet` of `groups` row groups of `rows` rows:
/// `file` and `row` int64 columns, a float list `emb` of 4, a string `tag`; and the same
/// tables as Arrow IPC files `part-F.arrow`, a record batch for each row group.
fn write_parquet(root: &Path, files: usize, groups: usize, rows: usize) {
    let script = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
root, files, groups, rows = sys.argv[1], *map(int, sys.argv[2:5])
for f in range(files):
    n = groups * rows
    t = pa.table({
        "file": pa.array([f] * n, pa.int64()),
        "row": pa.array(range(n), pa.int64()),
        "emb": pa.array([[float(i)] * 4 for i in range(n)], pa.list_(pa.float32(), 4)),
        "tag": pa.array([f"f{f}r{i}" for i in range(n)]),
    })
    pq.write_table(t, f"{root}/part-{f}.parquet", row_group_size=rows, compression="snappy")
    with pa.ipc.new_file(f"{root}/part-{f}.arrow", t.schema) as ipc:
        for batch in t.to_batches(max_chunksize=rows):
            ipc.write_batch(batch)
"#;
    python(script, &[root.to_str().unwrap(), &files.to_string(), &groups.to_string(), &rows.to_string()]);
}

fn python(script: &str, args: &[&str]) {
    let output = std::process::Command::new("python3").arg("-c").arg(script).args(args).output().unwrap();
    assert!(output.status.success(), "pyarrow: {}", String::from_utf8_lossy(&output.stderr));
}

fn parquet_spec(files: &str) -> Value {
    json!({
        "source": {"files": [files], "format": "PARQUET"},
        "decoder": {"columns": {"columns": [{"name": "file"}, {"name": "row"}, {"name": "emb"}, {"name": "tag"}]}},
        "pipeline": {"seed": 5, "shuffleFiles": true, "cycleLength": 2, "blockLength": 7, "numEpochs": 2,
                     "shuffle": {"bufferSize": 16}, "batchSize": 8}
    })
}

fn elements(lines: &[Value]) -> Vec<Value> {
    lines.iter().filter(|l| l.get("seq").is_some()).cloned().collect()
}

/// Reads `k` elements with a checkpoint every 3, kills the server (SIGKILL), resumes
/// from the last token on a new server over the same state: the two parts make the
/// uninterrupted sequence. `start` starts a server on `state`.
fn resume_after_sigkill(k: u64, spec: &Value, start: &dyn Fn(&Path) -> ServerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, spec);
    let server = start(state.path());
    let full = jsonl(&readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]).stdout);
    assert_eq!(full.last().unwrap()["end_of_sequence"], true, "{:?}", full.last());
    let k_str = k.to_string();
    let head = readerctl(
        &server.addr,
        &["read", "--spec", &spec_path, "--max-batches", &k_str, "--checkpoint-every", "3", "--output", "jsonl"],
    );
    assert!(head.status.success(), "{}", String::from_utf8_lossy(&head.stdout));
    let head = jsonl(&head.stdout);
    let token = head.last().unwrap()["checkpoint"].as_str().unwrap().to_owned();
    server.kill();

    let server = start(state.path());
    let tail = readerctl(&server.addr, &["read", "--resume", &token, "--output", "jsonl"]);
    assert!(tail.status.success(), "{}", String::from_utf8_lossy(&tail.stdout));
    let tail = jsonl(&tail.stdout);
    let resumed: Vec<Value> = elements(&head).into_iter().chain(elements(&tail)).collect();
    assert_eq!(resumed.len(), elements(&full).len(), "resumed after {k} elements");
    assert!(resumed == elements(&full), "resumed after {k} elements: the uninterrupted sequence");
}

#[test]
fn parquet_resumes_exactly_after_sigkill_mid_row_group() {
    let data = tempfile::tempdir().unwrap();
    // 3 files of 3 row groups of 50 rows: batches of 8 end inside row groups.
    write_parquet(data.path(), 3, 3, 50);
    for k in [3, 21, 40] {
        resume_after_sigkill(k, &parquet_spec("part-*.parquet"), &|state| {
            ServerProcess::start_in(state, &[data.path()], &[])
        });
    }
}

/// The exact global shuffle over Parquet rows: each epoch is a permutation of every row
/// (row indexes from the footers), and it resumes exactly after SIGKILL.
#[test]
fn the_global_shuffle_of_parquet_rows_is_a_permutation_per_epoch_and_resumes_exactly() {
    let data = tempfile::tempdir().unwrap();
    write_parquet(data.path(), 3, 3, 50);
    let spec = json!({
        "source": {"files": ["part-*.parquet"], "format": "PARQUET"},
        "decoder": {"columns": {"columns": [{"name": "row"}, {"name": "tag"}]}},
        "pipeline": {"seed": 8, "shuffle": {"global": true}, "numEpochs": 2, "batchSize": 8}
    });
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec);
    let server = ServerProcess::start(&[data.path()]);
    let lines = jsonl(&readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]).stdout);
    let keys: Vec<String> = elements(&lines)
        .iter()
        .flat_map(|l| l["keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_owned()).collect::<Vec<_>>())
        .collect();
    assert_eq!(keys.len(), 2 * 450);
    let mut every: Vec<String> = (0..3).flat_map(|f| (0..150).map(move |r| format!("part-{f}.parquet:{r}"))).collect();
    every.sort();
    for epoch in keys.chunks(450) {
        let mut sorted = epoch.to_vec();
        sorted.sort();
        assert_eq!(sorted, every, "each epoch holds every row once");
        assert_ne!(epoch[..20], every[..20], "in a shuffled order");
    }
    assert_ne!(keys[..450], keys[450..], "each epoch its own permutation");
    drop(server);
    resume_after_sigkill(30, &spec, &|state| ServerProcess::start_in(state, &[data.path()], &[]));
}

#[test]
fn parquet_from_s3_resumes_exactly_after_sigkill_mid_row_group() {
    let local = tempfile::tempdir().unwrap();
    write_parquet(local.path(), 3, 3, 50);
    let s3 = S3Server::start();
    s3.create_bucket("training");
    s3.upload_dir("training", "columnar", local.path());
    let root = "s3://training/columnar";
    resume_after_sigkill(21, &parquet_spec("part-*.parquet"), &|state| {
        ServerBuilder::new(&[root]).env(&s3.s3_env()).state_dir(state).start()
    });

    // An object replaced since the checkpoint: the token is refused, naming it.
    let server = ServerBuilder::new(&[root]).env(&s3.s3_env()).start();
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &parquet_spec("part-*.parquet"));
    let head = jsonl(
        &readerctl(
            &server.addr,
            &["read", "--spec", &spec_path, "--max-batches", "5", "--checkpoint-every", "5", "--output", "jsonl"],
        )
        .stdout,
    );
    let token = head.last().unwrap()["checkpoint"].as_str().unwrap().to_owned();
    let other = tempfile::tempdir().unwrap();
    write_parquet(other.path(), 2, 2, 30);
    s3.put("training", "columnar/part-1.parquet", &std::fs::read(other.path().join("part-1.parquet")).unwrap());
    let refused = jsonl(&readerctl(&server.addr, &["read", "--resume", &token, "--output", "jsonl"]).stdout);
    let err = &refused.last().unwrap()["error"];
    assert_eq!(err["code"], "FAILED_PRECONDITION", "{err}");
    assert!(err["message"].as_str().unwrap().contains("part-1.parquet changed since the checkpoint"), "{err}");
}

/// Reads `file` (written by `write_parquet` with 1 file of 4 units of 25 rows) from S3
/// through a proxy with `spec`: its `row` column's values, in order, and the requests
/// the server made to the store.
fn rows_and_requests_from_s3(file: &str, spec: &Value) -> (Vec<i64>, u64) {
    let local = tempfile::tempdir().unwrap();
    write_parquet(local.path(), 1, 4, 25);
    let s3 = S3Server::start();
    s3.create_bucket("training");
    s3.put("training", &format!("one/{file}"), &std::fs::read(local.path().join(file)).unwrap());
    let proxy = readerd_tests::s3::FaultProxy::start(&s3.endpoint);
    let server = ServerBuilder::new(&["s3://training/one"]).env(&proxy.s3_env()).start();
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, spec);
    let before = proxy.requests();
    let read = jsonl(&readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]).stdout);
    let requests = proxy.requests() - before;
    let rows = elements(&read)
        .iter()
        .flat_map(|element| element["features"]["row"]["values"].as_array().unwrap().clone())
        .map(|row| row.as_i64().unwrap())
        .collect();
    println!("{requests} requests to the store");
    (rows, requests)
}

/// An Arrow IPC file read from S3: its footer is read once per opening (the reader's
/// schema check, then the read itself), and its batches, read in order, come in one
/// streamed GET: 6 requests in all, counted at a proxy, where reading the footer three
/// times an opening took 12.
#[test]
fn an_arrow_ipc_file_from_s3_is_read_with_its_footer_read_once_per_opening() {
    let spec = json!({
        "source": {"files": ["part-0.arrow"], "format": "ARROW_IPC"},
        "decoder": {"columns": {"columns": [{"name": "row"}]}},
        "pipeline": {"batchSize": 10}
    });
    let (rows, requests) = rows_and_requests_from_s3("part-0.arrow", &spec);
    assert_eq!(rows, (0..100).collect::<Vec<_>>(), "every row of the 4 batches, in order");
    assert!(requests <= 8, "{requests} requests to read one Arrow IPC file of 4 batches");
}

/// A Parquet file read from S3: a row group's column chunks, one after the other in the
/// file, come in one GET, not one per column (requests counted at a proxy).
#[test]
fn a_parquet_row_groups_column_chunks_from_s3_come_in_one_get() {
    let mut spec = parquet_spec("part-0.parquet");
    spec["pipeline"] = json!({"batchSize": 10});
    let (rows, requests) = rows_and_requests_from_s3("part-0.parquet", &spec);
    assert_eq!(rows, (0..100).collect::<Vec<_>>(), "every row of the 4 row groups, in order");
    // 4 row groups of 4 column chunks: 4 GETs for them. A GET per chunk made 21 in all.
    assert!(requests <= 10, "{requests} requests to read one Parquet file of 4 row groups");
}

/// Parquet from S3 through a proxy that fails and cuts requests: faults within the
/// retries give exactly the rows read without faults (row groups fetched ahead included),
/// and a store that stops answering is UNAVAILABLE naming the object, not a short read.
#[test]
fn parquet_from_s3_reads_through_store_faults_and_fails_unavailable_when_it_is_gone() {
    let local = tempfile::tempdir().unwrap();
    write_parquet(local.path(), 2, 4, 200);
    let s3 = S3Server::start();
    s3.create_bucket("training");
    s3.upload_dir("training", "faults", local.path());
    let proxy = readerd_tests::s3::FaultProxy::start(&s3.endpoint);
    let server =
        ServerBuilder::new(&["s3://training/faults"]).env(&proxy.s3_env()).args(&["--object-retries", "3"]).start();
    let dir = tempfile::tempdir().unwrap();
    // Files by name, not a glob: no listing, whose body the proxy could cut.
    let mut spec = parquet_spec("part-0.parquet");
    spec["source"]["files"] = json!(["part-0.parquet", "part-1.parquet"]);
    let spec_path = write_spec(&dir, &spec);
    let read = || jsonl(&readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]).stdout);
    let clean = read();
    assert_eq!(elements(&clean).len(), 2 * 2 * 4 * 200 / 8, "two epochs of 1,600 rows in batches of 8");

    proxy.set_delay(std::time::Duration::from_millis(20));
    proxy.fail_next(2);
    proxy.drop_next_body(1);
    assert!(read() == clean, "the same batches as without faults");
    // Every fault was served (two 503s and a cut body), and the read still gave it all.
    assert_eq!(proxy.faults_pending(), 0, "the faults were met");

    proxy.fail_all(true);
    let gone = read();
    proxy.fail_all(false);
    let err = &gone.last().unwrap()["error"];
    assert_eq!(err["code"], "UNAVAILABLE", "{err}");
    assert!(err["message"].as_str().unwrap().contains("part-"), "names the object: {err}");
}

/// The status line readerctl prints for a read of `spec` that fails.
fn failed_read(addr: &str, spec: &Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, spec);
    let output = readerctl(addr, &["read", "--spec", &spec_path, "--output", "jsonl"]);
    assert!(!output.status.success(), "{}", String::from_utf8_lossy(&output.stdout));
    jsonl(&output.stdout).last().unwrap()["error"].clone()
}

fn one_file(name: &str) -> Value {
    json!({"source": {"files": [name], "format": "PARQUET"}, "pipeline": {"batchSize": 50}})
}

/// The byte range of row group `group`'s column `column` chunk data in `path`.
fn column_chunk(path: &Path, group: usize, column: usize) -> (usize, usize) {
    let script = r#"
import sys, pyarrow.parquet as pq
c = pq.ParquetFile(sys.argv[1]).metadata.row_group(int(sys.argv[2])).column(int(sys.argv[3]))
start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
print(start, c.total_compressed_size)
"#;
    let output = std::process::Command::new("python3")
        .args(["-c", script, path.to_str().unwrap(), &group.to_string(), &column.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let mut numbers = text.split_whitespace().map(|n| n.parse::<usize>().unwrap());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[test]
fn bad_parquet_files_name_the_file_row_group_and_column_and_the_server_keeps_serving() {
    let data = tempfile::tempdir().unwrap();
    let root = data.path();
    write_parquet(root, 1, 3, 40);
    let good = std::fs::read(root.join("part-0.parquet")).unwrap();
    // A footer cut short.
    std::fs::write(root.join("cut.parquet"), &good[..good.len() - 30]).unwrap();
    // Row group 1's `tag` column chunk overwritten with garbage (its page header too).
    let (start, len) = column_chunk(&root.join("part-0.parquet"), 1, 3);
    let mut corrupt = good.clone();
    corrupt[start..start + len].iter_mut().enumerate().for_each(|(i, b)| *b = (i * 37 % 251) as u8);
    std::fs::write(root.join("corrupt.parquet"), &corrupt).unwrap();
    // A second file without `tag`, and one where `row` is a string.
    python(
        r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"file": [1], "row": [0], "emb": pa.array([[0.0] * 4], pa.list_(pa.float32(), 4))}), sys.argv[1] + "/zz-no-tag.parquet")
pq.write_table(pa.table({"file": [1], "row": ["0"], "emb": pa.array([[0.0] * 4], pa.list_(pa.float32(), 4)), "tag": ["x"]}), sys.argv[1] + "/zz-row-text.parquet")
"#,
        &[root.to_str().unwrap()],
    );
    let server = ServerProcess::start(&[root]);

    let cut = failed_read(&server.addr, &one_file("cut.parquet"));
    assert_eq!(cut["code"], "DATA_LOSS", "{cut}");
    assert!(cut["message"].as_str().unwrap().contains("cut.parquet"), "{cut}");

    let corrupt = failed_read(&server.addr, &one_file("corrupt.parquet"));
    let message = corrupt["message"].as_str().unwrap();
    assert_eq!(corrupt["code"], "DATA_LOSS", "{corrupt}");
    assert!(
        message.contains("corrupt.parquet") && message.contains("row group 1") && message.contains("column tag"),
        "{corrupt}"
    );

    for (file, what) in
        [("zz-no-tag.parquet", "column tag is not in the file"), ("zz-row-text.parquet", "column row is")]
    {
        let spec =
            json!({"source": {"files": ["part-0.parquet", file], "format": "PARQUET"}, "pipeline": {"batchSize": 50}});
        let err = failed_read(&server.addr, &spec);
        assert_eq!(err["code"], "INVALID_ARGUMENT", "{err}");
        let message = err["message"].as_str().unwrap();
        assert!(message.contains(file) && message.contains(what), "{err}");
    }
    // A column the spec asks for that no file has: refused when the reader opens.
    let mut missing = one_file("part-0.parquet");
    missing["decoder"] = json!({"columns": {"columns": [{"name": "price"}]}});
    let err = failed_read(&server.addr, &missing);
    assert_eq!(err["code"], "INVALID_ARGUMENT", "{err}");
    assert!(err["message"].as_str().unwrap().contains("column price is not in the file"), "{err}");

    // An Arrow IPC file with bytes cut out of its body: the footer's blocks lie past the
    // data, refused before the Arrow reader trusts their lengths.
    python(
        r#"
import sys, pyarrow as pa, pyarrow.feather as feather
feather.write_feather(pa.table({"n": pa.array(range(3000), pa.int64())}), sys.argv[1], compression="uncompressed", chunksize=1000)
"#,
        &[root.join("cut.arrow").to_str().unwrap()],
    );
    let mut arrow = std::fs::read(root.join("cut.arrow")).unwrap();
    arrow.drain(2000..6000);
    std::fs::write(root.join("cut.arrow"), &arrow).unwrap();
    let mut ipc = one_file("cut.arrow");
    ipc["source"]["format"] = json!("ARROW_IPC");
    let err = failed_read(&server.addr, &ipc);
    assert_eq!(err["code"], "DATA_LOSS", "{err}");
    assert!(err["message"].as_str().unwrap().contains("cut.arrow: block"), "{err}");

    // Nothing was lost: the good file reads whole.
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &one_file("part-0.parquet"));
    let lines = jsonl(&readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]).stdout);
    assert_eq!(elements(&lines).len(), 3);
}

/// `bytes` (a Parquet file) with its footer's and each row group's row count claiming
/// 2^40 rows: the footer is thrift compact, where an i64 field after a list is the byte
/// 0x16 then the zigzag varint of the value.
fn claim_rows(bytes: &[u8], file_rows: u64, group_rows: u64) -> Vec<u8> {
    let varint = |mut value: u64| {
        let mut out = Vec::new();
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    };
    let field = |rows: u64| [vec![0x16], varint(rows << 1)].concat();
    let footer_len = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap()) as usize;
    let footer_start = bytes.len() - 8 - footer_len;
    let mut footer = bytes[footer_start..bytes.len() - 8].to_vec();
    let mut replaced = 0;
    for rows in [file_rows, group_rows] {
        let (from, to) = (field(rows), field(1 << 40));
        while let Some(at) = footer.windows(from.len()).position(|w| w == from.as_slice()) {
            footer.splice(at..at + from.len(), to.iter().copied());
            replaced += 1;
        }
    }
    // The file's count, each row group's, and each scalar column chunk's value count (its
    // `num_values`, an i64 after a list too): 1 + 2 + 3 × 2 (emb's chunks hold 1,200).
    assert_eq!(replaced, 9, "the row counts were found in the footer");
    let mut out = bytes[..footer_start].to_vec();
    out.extend_from_slice(&footer);
    out.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    out.extend_from_slice(b"PAR1");
    out
}

#[test]
fn footer_and_page_claims_are_checked_before_anything_is_allocated_from_them() {
    let data = tempfile::tempdir().unwrap();
    write_parquet(data.path(), 1, 2, 300);
    let bytes = std::fs::read(data.path().join("part-0.parquet")).unwrap();
    std::fs::write(data.path().join("claims.parquet"), claim_rows(&bytes, 600, 300)).unwrap();
    let server = ServerProcess::start_with(&[data.path()], &["--memory-budget", "268435456"]);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &one_file("claims.parquet"));
    let output = readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]);
    let lines = jsonl(&output.stdout);
    // The rows the first row group holds, then DATA_LOSS naming the file and row group.
    let rows: usize = elements(&lines).iter().map(|l| l["keys"].as_array().unwrap().len()).sum();
    assert_eq!(rows, 300);
    assert!(!output.status.success());
    let err = &lines.last().unwrap()["error"];
    let message = err["message"].as_str().unwrap();
    assert_eq!(err["code"], "DATA_LOSS", "{err}");
    assert!(message.contains("claims.parquet: row group 0") && message.contains("ends after row 300"), "{err}");
    // A page header claiming a megabyte uncompressed in a column chunk of 16 KB.
    python(
        r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"n": pa.array(range(2000), pa.int64())}), sys.argv[1], compression="none", use_dictionary=False)
"#,
        &[data.path().join("page.parquet").to_str().unwrap()],
    );
    let mut page = std::fs::read(data.path().join("page.parquet")).unwrap();
    let (start, _) = column_chunk(&data.path().join("page.parquet"), 0, 0);
    // DATA_PAGE (field 1, zigzag 0), then field 2, uncompressed_page_size, as 3 varint bytes.
    assert_eq!(page[start..start + 3], [0x15, 0x00, 0x15]);
    assert!(page[start + 3] & 0x80 != 0 && page[start + 4] & 0x80 != 0 && page[start + 5] & 0x80 == 0);
    page[start + 3..start + 6].copy_from_slice(&[0xfe, 0xff, 0x7f]);
    std::fs::write(data.path().join("page.parquet"), &page).unwrap();
    let err = failed_read(&server.addr, &one_file("page.parquet"));
    assert_eq!(err["code"], "DATA_LOSS", "{err}");
    let message = err["message"].as_str().unwrap();
    assert!(message.contains("page.parquet: row group 0, column n: page 0 claims 1048575 bytes"), "{err}");

    let peak_mib = server.memory_kib("VmHWM") / 1024;
    assert!(peak_mib < 256, "the server's peak RSS was {peak_mib} MiB");
    // And it serves on.
    let spec_path = write_spec(&dir, &one_file("part-0.parquet"));
    let lines = jsonl(&readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]).stdout);
    assert_eq!(elements(&lines).len(), 12);
}

#[test]
fn three_replicas_deliver_every_parquet_row_exactly_once_per_epoch_through_a_replica_kill() {
    three_replicas_deliver_every_row_exactly_once("part-*.parquet", "PARQUET");
}

#[test]
fn three_replicas_deliver_every_arrow_ipc_row_exactly_once_per_epoch_through_a_replica_kill() {
    three_replicas_deliver_every_row_exactly_once("part-*.arrow", "ARROW_IPC");
}

/// 3 replicas over 8 files of 4 row groups (record batches), replica 1 SIGKILLed: every
/// row exactly once per epoch, and the ledger's splits are the row groups.
fn three_replicas_deliver_every_row_exactly_once(files: &str, format: &str) {
    let Some(db) = Database::new() else { return };
    let data = tempfile::tempdir().unwrap();
    // 8 files of 4 row groups of 100 rows: 3,200 rows an epoch.
    write_parquet(data.path(), 8, 4, 100);
    let spec = json!({
        "source": {"files": [files], "format": format},
        "decoder": {"columns": {"columns": [{"name": "row"}, {"name": "tag"}]}},
        "pipeline": {"seed": 3, "shuffleFiles": true, "numEpochs": 2, "batchSize": 8}
    });
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec);
    let mut expected = read_shared(&ServerProcess::start(&[data.path()]).addr, &spec_path);
    assert_eq!(expected.len(), 2 * 3200);
    expected.sort();

    let url = db.url();
    let replica = || {
        let state = tempfile::tempdir().unwrap();
        let args = ["--state-url", url.as_str(), "--lease-time", "2s", "--failover-grace", "30s"];
        (ServerProcess::start_in(state.path(), &[data.path()], &args), state)
    };
    let mut replicas: Vec<_> = (0..3).map(|_| Some(replica())).collect();
    let addrs: Vec<String> = replicas.iter().map(|r| r.as_ref().unwrap().0.addr.clone()).collect();
    let outputs: Vec<std::path::PathBuf> = (0..4).map(|i| dir.path().join(format!("consumer-{i}.jsonl"))).collect();
    let consumers = spawn_consumers(&addrs.join(","), &["--spec", &spec_path], &outputs);
    wait_until_printed(&outputs, 150);
    let (killed, _state) = replicas[1].take().unwrap();
    killed.kill();
    println!("{} lines printed when replica 1 was killed", lines_printed(&outputs));
    let mut all = wait_for_consumers(consumers, &outputs, true);
    all.sort();
    assert_eq!(all.len(), expected.len());
    assert!(all == expected, "every row exactly once per epoch");
    // The ledger's splits are the row groups, not the files.
    let mut ledger = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let splits: i64 = ledger.query_one("SELECT count(*) FROM readerd_splits WHERE epoch = 1", &[]).unwrap().get(0);
    assert_eq!(splits, 8 * 4);
}

/// Issue 52, item 8: a footer claiming 3e9 rows in a row group of 1,000 (its column chunk
/// holding 2,000 values, the truth) read with the exact global shuffle is DATA_LOSS naming
/// the file and the claim, checked before the row index is sized from it (it was
/// RESOURCE_EXHAUSTED, "retry later": an index of 3e9 rows against the memory budget); the
/// server goes on serving the honest file.
#[test]
fn a_footer_claiming_3e9_rows_in_a_group_of_1000_is_data_loss_for_the_global_shuffle() {
    let data = tempfile::tempdir().unwrap();
    python(
        r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
root = sys.argv[1]
# A list column of 2 items a row: its chunk's value count (2,000) is not the row count.
pq.write_table(pa.table({"v": pa.array([[i, i] for i in range(1000)], pa.list_(pa.int64()))}),
               f"{root}/honest.parquet", row_group_size=1000)
b = open(f"{root}/honest.parquet", "rb").read()
def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)
n = int.from_bytes(b[-8:-4], "little")
footer = b[-8 - n:-8]
# The file's num_rows and the row group's: thrift compact i64 fields (0x16, zigzag varint).
old, new = b"\x16" + varint(1000 << 1), b"\x16" + varint(3_000_000_000 << 1)
assert footer.count(old) == 2, footer.count(old)
footer = footer.replace(old, new)
open(f"{root}/lies.parquet", "wb").write(b[:-8 - n] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
"#,
        &[data.path().to_str().unwrap()],
    );
    let message = lying_file_is_data_loss_and_the_honest_one_serves(data.path(), "PARQUET", "parquet");
    assert!(
        message.contains("lies.parquet: row group 0: the footer claims 3000000000 rows")
            && message.contains("at most 2000 values"),
        "{message}"
    );
}

/// The same for an Arrow IPC file: a record batch header claiming 3e9 rows (its length
/// and its column's field node) for a body of 8,000 bytes (1,000 int64 values, the truth)
/// read with the exact global shuffle is DATA_LOSS naming the file, the batch and the
/// claim, checked before the row index is sized from it (it was RESOURCE_EXHAUSTED); the
/// server goes on serving the honest file.
#[test]
fn an_arrow_ipc_batch_header_claiming_3e9_rows_in_a_body_of_8000_bytes_is_data_loss_for_the_global_shuffle() {
    let data = tempfile::tempdir().unwrap();
    python(
        r#"
import sys, pyarrow as pa
root = sys.argv[1]
table = pa.table({"v": pa.array(range(1000), pa.int64())})
with pa.ipc.new_file(f"{root}/honest.arrow", table.schema) as writer:
    writer.write_table(table)
b = open(f"{root}/honest.arrow", "rb").read()
# The batch header's length and its column's field node length: little-endian i64s.
old, new = (1000).to_bytes(8, "little"), (3_000_000_000).to_bytes(8, "little")
assert b.count(old) == 2, b.count(old)
open(f"{root}/lies.arrow", "wb").write(b.replace(old, new))
"#,
        &[data.path().to_str().unwrap()],
    );
    let message = lying_file_is_data_loss_and_the_honest_one_serves(data.path(), "ARROW_IPC", "arrow");
    assert!(
        message.contains("lies.arrow: record batch 0: the header claims 3000000000 rows")
            && message.contains("its body of 8000 bytes holds at most 64000"),
        "{message}"
    );
}

/// A server on `data` reads `lies.EXT` (of `format`) with the exact global shuffle: it
/// must fail DATA_LOSS, whose message is returned; then the server serves `honest.EXT`,
/// all 1,000 rows of it.
fn lying_file_is_data_loss_and_the_honest_one_serves(data: &std::path::Path, format: &str, ext: &str) -> String {
    let server = ServerProcess::start_with(&[data], &["--memory-budget", "268435456"]);
    let global = |file: &str| {
        json!({"source": {"files": [file], "format": format},
               "pipeline": {"seed": 3, "shuffle": {"global": true}, "batchSize": 64}})
    };
    let err = failed_read(&server.addr, &global(&format!("lies.{ext}")));
    assert_eq!(err["code"], "DATA_LOSS", "{err}");
    // It serves on: the honest file's rows, each once.
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &global(&format!("honest.{ext}")));
    let lines = jsonl(&readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]).stdout);
    let rows: usize = elements(&lines).iter().map(|l| l["keys"].as_array().unwrap().len()).sum();
    assert_eq!(rows, 1000, "{:?}", lines.last());
    err["message"].as_str().unwrap().to_owned()
}
