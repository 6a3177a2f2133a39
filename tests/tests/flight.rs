//! Arrow Flight as plain pyarrow reads it, against a real server: automatic checkpoints
//! ride on record batches, so `read_all`, `read_pandas`, `to_reader` and `read_chunk`
//! loops get every row and the checkpoints still resume exactly; tickets with negative
//! checkpoint periods or an oversized `sessionId` are refused naming the field. Needs
//! python3 with pyarrow and pandas (`pip install -r client/python/requirements-test.txt`).

use std::fmt::Write as _;
use std::process::Command;

use readerd_tests::{ServerProcess, write_file};

/// Rows of the CSV file, one element (one record batch) each: not a multiple of 5, so
/// the last checkpoint by count leaves rows to resume.
const ROWS: usize = 3003;

/// Reads `rows.csv` (`id,x`: `i,i/2`) with the ticket's extra fields (argv[2], JSON) in
/// every way pyarrow reads a stream, and resumes from checkpoints carried on batches.
const READS: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.flight as flight

addr, extra, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
spec = {"source": {"files": ["rows.csv"], "format": "CSV", "header": True},
        "decoder": {"csv": {"columns": [{"dtype": "INT64"}, {"dtype": "FLOAT32"}]}}}
client = flight.connect(f"grpc://{addr}")
ids = list(range(n))

def ticket(request):
    return flight.Ticket(json.dumps(request).encode())

def get():
    return client.do_get(ticket({"spec": spec, **extra}))

table = get().read_all()
assert table.num_rows == n, f"read_all: {table.num_rows} rows of {n}"
assert table.column("id").to_pylist() == ids, "read_all: not every id in order"
frame = get().read_pandas()
assert len(frame) == n, f"read_pandas: {len(frame)} rows of {n}"
assert frame["id"].tolist() == ids and frame["x"].tolist() == [i / 2 for i in ids], "read_pandas"
got = []
for batch in get().to_reader():
    got += batch.column("id").to_pylist()
assert got == ids, f"to_reader: {len(got)} rows of {n}"

def chunks(reader):
    """(ids, app_metadata) of each record batch; the end marker is the last message."""
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        meta = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata else {}
        if chunk.data is None:
            assert meta.get("end_of_sequence") is True, f"a message without a batch: {meta}"
            continue
        yield chunk.data.column("id").to_pylist(), meta

def checkpoints(reader, stop_after=None):
    """Rows received, and (token, rows received up to and including its batch) of each
    checkpoint; stops at the first checkpoint past `stop_after` rows."""
    received, tokens, empty = [], [], 0
    for rows, meta in chunks(reader):
        received += rows
        if "seq" in meta:
            assert meta["keys"] and len(meta["keys"]) == len(rows), meta
        if "checkpoint" in meta:
            # The token covers exactly what was received up to and including this batch.
            assert meta["after_seq"] == received[-1], (meta["after_seq"], len(received))
            if "seq" in meta:
                assert meta["seq"] == meta["after_seq"], meta
            else:
                assert not rows, f"a checkpoint without seq on a batch of {len(rows)} rows"
                empty += 1
            tokens.append((meta["checkpoint"], len(received)))
            if stop_after is not None and len(received) > stop_after:
                break
    return received, tokens, empty

received, tokens, empty = checkpoints(get())
assert received == ids, f"read_chunk: {len(received)} rows of {n}"
assert tokens, "no checkpoint"
every = extra.get("checkpointEvery")
if every:
    assert [at for _, at in tokens] == list(range(every, n + 1, every)), [at for _, at in tokens][:10]

def resumed(token):
    table = client.do_get(ticket({"resumeToken": token})).read_all()
    return table.column("id").to_pylist() if table.num_rows else []

# The last checkpoint carried on a batch resumes with exactly the rows after it (by count,
# some are left: `n` is not a multiple of `every`).
token, at = tokens[-1]
assert at < n or not every, "the last checkpoint by count covers every row"
assert resumed(token) == ids[at:], f"resumed after {at}"
# A trainer that stops midway resumes from the last checkpoint it received.
seen, tokens_seen, _ = checkpoints(get(), stop_after=n // 2)
token, at = tokens_seen[-1]
assert seen == ids[:at] and at > n // 2, (len(seen), at)
assert resumed(token) == ids[at:], f"resumed midway after {at}"
print(f"{extra}: {len(tokens)} checkpoints, {empty} on batches of 0 rows")
"#;

/// Each ticket (argv[2], a JSON list of extra fields) is refused with INVALID_ARGUMENT
/// naming the field (its `must` substring).
const REFUSALS: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.flight as flight

addr, cases = sys.argv[1], json.loads(sys.argv[2])
spec = {"source": {"files": ["rows.csv"], "format": "CSV", "header": True},
        "decoder": {"csv": {"columns": [{"dtype": "INT64"}, {"dtype": "FLOAT32"}]}}}
client = flight.connect(f"grpc://{addr}")
for extra, must in cases:
    try:
        rows = client.do_get(flight.Ticket(json.dumps({"spec": spec, **extra}).encode())).read_all().num_rows
    except pa.ArrowInvalid as err:  # INVALID_ARGUMENT, as pyarrow raises it
        assert "invalid argument" in str(err).lower() and must in str(err), str(err)
        continue
    raise AssertionError(f"{must}: accepted, {rows} rows")
# A session id of 256 bytes is within the limit.
table = client.do_get(flight.Ticket(json.dumps({"spec": spec, "sessionId": "s" * 256}).encode())).read_all()
assert table.num_rows > 0
"#;

fn python(script: &str, args: &[&str]) -> String {
    let ready = Command::new("python3").args(["-c", "import pyarrow.flight, pandas"]).output();
    match ready {
        Ok(out) if out.status.success() => {}
        other => panic!(
            "python3 with pyarrow and pandas is needed: pip install -r client/python/requirements-test.txt\n{other:?}"
        ),
    }
    let output = Command::new("python3").arg("-c").arg(script).args(args).output().expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "pyarrow: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

fn rows_csv() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let mut csv = String::from("id,x\n");
    for i in 0..ROWS {
        writeln!(csv, "{i},{}", i as f64 / 2.0).unwrap();
    }
    write_file(root.path(), "rows.csv", csv.as_bytes());
    root
}

fn host(server: &ServerProcess) -> &str {
    server.addr.strip_prefix("http://").unwrap_or(&server.addr)
}

/// [`READS`] (its assertions: every reader gets every row, each checkpoint covers what
/// was received, the last resumes exactly) against a server of [`rows_csv`], with
/// `checkpoints` added to the ticket.
fn every_reader_gets_every_row_with(checkpoints: &str) {
    let root = rows_csv();
    let server = ServerProcess::start(&[root.path()]);
    let out = python(READS, &[host(&server), checkpoints, &ROWS.to_string()]);
    eprintln!("{out}");
}

#[test]
fn checkpoints_by_count_ride_on_batches_and_every_reader_gets_every_row() {
    every_reader_gets_every_row_with(r#"{"checkpointEvery": 5}"#);
}

#[test]
fn checkpoints_by_time_ride_on_batches_and_every_reader_gets_every_row() {
    every_reader_gets_every_row_with(r#"{"checkpointIntervalMs": 1}"#);
}

#[test]
fn tickets_with_negative_checkpoint_periods_or_an_oversized_session_id_are_refused() {
    let root = rows_csv();
    let server = ServerProcess::start(&[root.path()]);
    let cases = serde_json::json!([
        [{"checkpointEvery": -5}, "checkpointEvery"],
        [{"checkpointIntervalMs": -1}, "checkpointIntervalMs"],
        [{"sessionId": "s".repeat(100_000)}, "sessionId"],
        [{"sessionId": "s".repeat(257)}, "sessionId"],
    ]);
    python(REFUSALS, &[host(&server), &cases.to_string()]);
}
