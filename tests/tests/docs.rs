//! The guide stays true to the code: every field of the dataset spec's proto is in its
//! reference (docs/guide.md, as the proto3 JSON name a spec file uses), and the error lines
//! it quotes are the ones readerctl prints.

use readerd_tests::{ServerProcess, readerctl};

fn root(path: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../").to_owned() + path).unwrap()
}

/// The proto3 JSON name of a proto field (`skip_header_lines` → `skipHeaderLines`).
fn json_name(field: &str) -> String {
    let mut parts = field.split('_');
    let first = parts.next().unwrap_or_default().to_owned();
    parts.fold(first, |mut name, part| {
        let mut chars = part.chars();
        if let Some(c) = chars.next() {
            name.extend(c.to_uppercase());
            name.push_str(chars.as_str());
        }
        name
    })
}

#[test]
fn every_field_of_the_spec_is_in_the_guides_reference() {
    let proto = root("proto/proto/readerd/v1/dataset_spec.proto");
    let guide = root("docs/guide.md");
    let mut fields = Vec::new();
    for line in proto.lines().map(str::trim) {
        // `[repeated|optional] TYPE name = N;`
        let Some(declaration) = line.strip_suffix(';').filter(|l| l.contains(" = ") && !l.starts_with("//")) else {
            continue;
        };
        let words: Vec<&str> = declaration.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "=") else { continue };
        // (An enum's values, `NAME = N;`, have no type before the name.)
        if at >= 2 {
            fields.push(json_name(words[at - 1]));
        }
    }
    assert!(fields.len() > 100, "the spec's fields: {}", fields.len());
    let missing: Vec<&String> =
        fields.iter().filter(|f| !guide.contains(&format!("`{f}`")) && !guide.contains(&format!("\"{f}\""))).collect();
    assert!(missing.is_empty(), "fields of dataset_spec.proto the guide's reference does not name: {missing:?}");
}

#[test]
fn the_error_lines_the_guide_quotes_are_the_ones_readerctl_prints() {
    let guide = root("docs/guide.md");
    for form in ["`readerctl: CODE: message`", "`readerctl: cannot connect to ADDR: ...`", "`error: CODE: message`"] {
        assert!(guide.contains(form), "the guide no longer quotes {form}");
    }
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&[data.path()]);
    // A call the server refuses.
    let refused = readerctl(&server.addr, &["stats", "--container", "c", "--shared-name", "nothing-here"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr.starts_with("readerctl: NOT_FOUND: "), "{stderr}");
    // A server that cannot be reached.
    let unreachable = readerctl("http://127.0.0.1:1", &["list"]);
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert!(stderr.starts_with("readerctl: cannot connect to http://127.0.0.1:1: "), "{stderr}");
    // A failed stream, in text.
    let spec = data.path().join("spec.json");
    std::fs::write(&spec, r#"{"source": {"files": ["missing.tfrecord"], "format": "TFRECORD"}}"#).unwrap();
    let failed = readerctl(&server.addr, &["read", "--spec", spec.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1));
    assert!(stderr.lines().any(|line| line.starts_with("error: NOT_FOUND: ")), "{stderr}");
}
