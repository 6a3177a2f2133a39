//! The shape of the code a newcomer enters: in the crates' `src` folders (their unit
//! tests aside) every file opens with a `//!` doc that says what it holds, no two
//! modules import each other, directly or around a loop, files are read only through
//! `source/`, elements are decoded only through the reader's decode stage, only the
//! coordinator names the split ledger, and no run of 6 lines of code is written twice.
//!
//! Lengths are not checked: a module holds one idea, however long. Limits on file and
//! function lengths had become targets that code was split to meet, by size rather than
//! by what belongs together; what they stood for is checked instead: each module says
//! what it is, and dependencies run one way.
//!
//! Modules are the top-level modules of each crate, and the files of each folder among
//! themselves (a folder's `mod.rs` may use its files and they may use it, as Rust's
//! parent modules do).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const REPEAT_LINES: usize = 6;
const CRATES: [&str; 5] = ["common/src", "server/src", "client/src", "client/python/src", "proto/src"];

/// Where a decoder may be called: the decoders themselves, the reader's decode stage, and
/// the fuzzing entry points that feed the decoders arbitrary bytes.
const DECODER_CALLERS: [&str; 3] = ["server/src/decode/", "server/src/reader/decoding.rs", "server/src/fuzzing.rs"];

/// Whether `code` calls a decoder's entry points.
fn calls_a_decoder(code: &str) -> bool {
    [".decode_records(", ".decode_placed("].iter().any(|call| code.contains(call))
}

/// Where the split ledger may be named: the ledger (`cluster/`), its SQL (`state/`), the
/// coordinator and its ledger implementation, the one mapping of errors to statuses, and
/// the server's start, which opens the cluster.
const LEDGER_NAMERS: [&str; 6] = [
    "server/src/cluster/",
    "server/src/state/",
    "server/src/coordinator.rs",
    "server/src/reader/ledger_coordinator.rs",
    "server/src/error.rs",
    "server/src/server.rs",
];

/// Whether `code` names the split ledger's module or its types.
fn names_the_ledger(code: &str) -> bool {
    ["cluster::", "JobFeed", ".ledger()"].iter().any(|name| code.contains(name))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's code without its unit tests (from `#[cfg(test)]` on), with comments, string
/// and char literals blanked out (newlines kept), so braces and `crate::` are code.
fn code_of(source: &str) -> String {
    let source = match source.find("#[cfg(test)]") {
        Some(at) => &source[..at],
        None => source,
    };
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                out.push(blank(chars[i]));
                i += 1;
            }
            i += 2;
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars[..i].last().is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            let closes = |k: usize| chars[k] == '"' && (1..=hashes).all(|h| chars.get(k + h) == Some(&'#'));
            while j < chars.len() && !closes(j) {
                out.push(blank(chars[j]));
                j += 1;
            }
            out.push_str("\"\"");
            i = j + 1 + hashes;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                out.push(blank(chars.get(i).copied().unwrap_or(' ')));
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal ('{', '\n', '\''); a lifetime ('a) is left alone.
            let mut j = i + 1;
            if chars[j] == '\\' {
                j += 1;
            }
            j += 1;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The first identifier of every path after `prefix` (`crate::`, `super::`) in `code`,
/// including each member of a `prefix{a, b::c}` group.
fn referenced_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    for (at, _) in code.match_indices(prefix) {
        if code[..at].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut member = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(ident(member.trim()));
                        member.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    member.push(c);
                }
            }
            names.insert(ident(member.trim()));
        } else {
            names.insert(ident(rest));
        }
    }
    names.remove("");
    names.remove("self");
    names
}

/// A cycle in `edges`, if there is one, as the modules around it.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// A line that says something: not blank, not punctuation alone, not an import, a
/// module declaration or an attribute (those repeat by nature).
fn significant(line: &str) -> bool {
    let line = line.trim();
    line.chars().any(char::is_alphanumeric)
        && !["use ", "pub use ", "mod ", "pub mod ", "#["].iter().any(|p| line.starts_with(p))
}

/// Runs of [`REPEAT_LINES`] significant lines alike (trimmed) in two places of `files`
/// (`(name, code)`): each place's name and line, once per pair of files.
fn repeated_runs(files: &[(String, String)]) -> Vec<String> {
    let mut first_seen: std::collections::HashMap<Vec<&str>, (&str, usize, usize)> = Default::default();
    let mut pairs = BTreeSet::new();
    for (name, code) in files {
        let lines: Vec<(usize, &str)> =
            code.lines().enumerate().map(|(n, l)| (n + 1, l.trim())).filter(|(_, l)| significant(l)).collect();
        for (at, window) in lines.windows(REPEAT_LINES).enumerate() {
            let key: Vec<&str> = window.iter().map(|(_, l)| *l).collect();
            match first_seen.get(&key) {
                None => {
                    first_seen.insert(key, (name, window[0].0, at));
                }
                // The same file's overlapping windows are one run, not two.
                Some(&(other, _, other_at)) if other == name && at < other_at + REPEAT_LINES => {}
                Some(&(other, line, _)) => {
                    pairs.insert((other.to_owned(), line, name.clone(), window[0].0));
                }
            }
        }
    }
    let mut reported = BTreeSet::new();
    let mut runs = Vec::new();
    for (a, line_a, b, line_b) in pairs {
        if reported.insert((a.clone(), b.clone())) {
            runs.push(format!("{a}:{line_a} and {b}:{line_b}: {REPEAT_LINES} or more lines alike"));
        }
    }
    runs
}

/// Module dependency graphs: each crate's top-level modules, and each folder's files.
fn module_graphs(root: &Path, files: &[(PathBuf, String)]) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (path, code) in files {
        let relative = path.strip_prefix(root).unwrap();
        let parts: Vec<String> =
            relative.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
        let top = parts[0].clone();
        if parts.len() == 1 && (top == "lib" || top == "main") {
            continue;
        }
        let crate_graph = graphs.entry(root.display().to_string()).or_default();
        let uses = crate_graph.entry(top.clone()).or_default();
        uses.extend(referenced_after(code, "crate::").into_iter().filter(|m| *m != top));
        // Files of one folder among themselves, through `super::` (mod.rs aside).
        let file = parts.last().unwrap();
        if parts.len() >= 2 && file != "mod" {
            let folder = parts[..parts.len() - 1].join("/");
            let siblings: BTreeSet<String> = std::fs::read_dir(path.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().path().file_stem().unwrap().to_string_lossy().into_owned())
                .filter(|s| s != "mod")
                .collect();
            let folder_graph = graphs.entry(format!("{}/{folder}", root.display())).or_default();
            let uses = folder_graph.entry(file.clone()).or_default();
            uses.extend(referenced_after(code, "super::").into_iter().filter(|m| siblings.contains(m) && m != file));
        }
    }
    graphs
}

#[test]
fn modules_say_what_they_hold_and_depend_one_way() {
    let repo = repo();
    let mut problems = Vec::new();
    let mut all_files = Vec::new();
    for krate in CRATES {
        let root = repo.join(krate);
        let mut paths = Vec::new();
        rust_files(&root, &mut paths);
        paths.sort();
        let mut files = Vec::new();
        for path in paths {
            let source = std::fs::read_to_string(&path).unwrap();
            let code = code_of(&source);
            let name = path.strip_prefix(&repo).unwrap().display().to_string();
            if !source.trim_start().starts_with("//!") {
                problems.push(format!("{name}: opens with no `//!` doc saying what the module holds"));
            }
            // A file's records come from `source/` (FileRecords, RecordsAt), whatever
            // its format: nothing else opens a framed file itself.
            if code.contains("RecordFile::open(") && !name.starts_with("server/src/source/") {
                problems.push(format!("{name}: opens a RecordFile (read files through source::FileRecords)"));
            }
            // Every element is decoded by one stage, `reader/decoding.rs` (where a
            // per-element transform runs too): nothing else calls a decoder.
            if calls_a_decoder(&code) && !DECODER_CALLERS.iter().any(|allowed| name.starts_with(allowed)) {
                problems.push(format!("{name}: calls a decoder (decode through reader/decoding.rs's Decoding)"));
            }
            // What a reader answers to for what it hands out is its coordinator's: only
            // the coordinator (and the ledger itself) names the split ledger.
            if names_the_ledger(&code) && !LEDGER_NAMERS.iter().any(|a| name.starts_with(a)) {
                problems
                    .push(format!("{name}: names the split ledger (ask the reader's crate::coordinator::Coordinator)"));
            }
            all_files.push((name, code.clone()));
            files.push((path, code));
        }
        for (graph, edges) in module_graphs(&root, &files) {
            if let Some(cycle) = find_cycle(&edges) {
                let graph = Path::new(&graph).strip_prefix(&repo).unwrap().display().to_string();
                problems.push(format!("{graph}: modules import each other: {}", cycle.join(" -> ")));
            }
        }
    }
    problems.extend(repeated_runs(&all_files));
    assert!(problems.is_empty(), "the code's shape drifted:\n{}", problems.join("\n"));
}

/// The checks themselves see what they claim to.
#[test]
fn the_layout_checks_find_references_cycles_and_repeats() {
    let code = code_of("use crate::{a::{B, C}, d};\n// crate::commented\nlet s = \"crate::quoted\"; crate::e::f();");
    assert_eq!(referenced_after(&code, "crate::"), BTreeSet::from(["a".into(), "d".into(), "e".into()]));
    let edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::from([
        ("a".into(), BTreeSet::from(["b".into()])),
        ("b".into(), BTreeSet::from(["c".into()])),
        ("c".into(), BTreeSet::from(["a".into()])),
    ]);
    assert_eq!(find_cycle(&edges).unwrap(), ["a", "b", "c", "a"]);
    let one_way = BTreeMap::from([("a".into(), BTreeSet::from(["b".to_owned()])), ("b".into(), BTreeSet::new())]);
    assert_eq!(find_cycle(&one_way), None);
    let helper = "fn helper(x: u8) -> u8 {\n    let a = x + 1;\n\n    let b = a * 2;\n    }\n    let c = b - 3;\n    let d = c / 4;\n    d\n}\n";
    let files = [("a.rs".to_owned(), helper.to_owned()), ("b.rs".to_owned(), format!("use x;\n{helper}"))];
    assert_eq!(repeated_runs(&files), ["a.rs:1 and b.rs:2: 6 or more lines alike"]);
    assert!(repeated_runs(&files[..1]).is_empty(), "a run is not alike itself");
    assert!(calls_a_decoder(&code_of("let f = spec.decoder.decode_records(&v, &[], false);")));
    assert!(names_the_ledger(&code_of("use crate::cluster::JobFeed;")));
    assert!(!names_the_ledger(&code_of("// the JobFeed\nreader.coordinator().commit()?;")));
    assert!(!calls_a_decoder(&code_of("// spec.decoder.decode_records(&v)\nlet f = decoding.decode_record(&r, &k);")));
}
