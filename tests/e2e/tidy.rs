//! Guardrails on the code's shape that cost nothing to keep: SQL only in the
//! store, bidder-facing crates free of IO dependencies, a thin binary.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Where SQL may be written, and why.
const SQL_HOMES: [&str; 3] = [
    // Every statement and transaction of the system.
    "crates/tidemark-store",
    // What bidders link to read profiles: it must not pull in the store.
    "crates/tidemark-reader",
    // A measuring harness that checks the running system from outside, as
    // the tests do (`tests/` is not scanned either).
    "crates/tidemark-bench",
];

/// Crates bidders and publishers link: no runtime, socket, database or
/// compression dependency may reach them, however indirectly.
const BIDDER_FACING: [&str; 6] = [
    "tidemark-wire",
    "tidemark-profile",
    "tidemark-plan",
    "tidemark-features",
    "tidemark-checkpoint",
    "tidemark-learner",
];

const IO_CRATES: [&str; 11] = [
    "tokio",
    "tokio-postgres",
    "postgres-protocol",
    "deadpool-postgres",
    "zmq",
    "zmq-sys",
    "mio",
    "socket2",
    "flate2",
    "tracing-subscriber",
    "tidemark-store",
];

const SQL_WORDS: [&str; 14] = [
    "SELECT ",
    "INSERT INTO",
    "UPDATE ",
    "DELETE FROM",
    "CREATE ",
    "DROP ",
    "ALTER ",
    "TRUNCATE",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT",
    "SET LOCAL",
    "COPY ",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// SQL words inside string literals of a line (comments skipped).
fn sql_in(line: &str) -> Option<&'static str> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return None;
    }
    // Odd pieces of a split on quotes are inside literals (good enough for
    // this code base: SQL strings start on the line that opens them).
    line.split('"').skip(1).step_by(2).find_map(|lit| {
        SQL_WORDS
            .iter()
            .find(|w| lit.starts_with(**w) || lit.contains(&format!(" {}", w.trim_end())))
            .copied()
    })
}

#[test]
fn sql_lives_only_in_the_store() {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("src"), &mut files);
    for c in std::fs::read_dir(Path::new(ROOT).join("crates"))
        .unwrap()
        .flatten()
    {
        let rel = format!("crates/{}", c.file_name().to_string_lossy());
        if !SQL_HOMES.contains(&rel.as_str()) {
            rust_files(&c.path().join("src"), &mut files);
        }
    }
    assert!(files.len() > 20, "scanned {} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if let Some(w) = sql_in(line) {
                found.push(format!("{}:{}: {w:?} in {line:?}", f.display(), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "SQL outside {SQL_HOMES:?}; move it into tidemark-store:\n{}",
        found.join("\n")
    );
    // The scanner itself: it finds what it must.
    assert_eq!(
        sql_in(r#"    c.batch_execute("BEGIN").await?;"#),
        Some("BEGIN")
    );
    assert_eq!(sql_in(r#"  .query("SELECT 1", &[])"#), Some("SELECT "));
    assert_eq!(sql_in(r#"  // "SELECT 1" in a comment"#), None);
    assert_eq!(sql_in(r#"  tracing::info!("selected {n}")"#), None);
}

#[test]
fn bidder_facing_crates_have_no_io_dependency() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(Path::new(ROOT).join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name_of: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    // Normal (not dev, not build) dependencies of each package.
    let deps: HashMap<&str, Vec<&str>> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let normal = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| d["pkg"].as_str().unwrap())
                .collect();
            (n["id"].as_str().unwrap(), normal)
        })
        .collect();
    for krate in BIDDER_FACING {
        let root = name_of
            .iter()
            .find(|(_, n)| **n == krate)
            .map(|(id, _)| *id)
            .unwrap_or_else(|| panic!("{krate} is in the workspace"));
        let mut seen = BTreeSet::new();
        let mut todo = vec![root];
        while let Some(id) = todo.pop() {
            if seen.insert(name_of[id]) {
                todo.extend(deps.get(id).into_iter().flatten().copied());
            }
        }
        let io: Vec<&&str> = IO_CRATES.iter().filter(|c| seen.contains(**c)).collect();
        assert!(io.is_empty(), "{krate} depends on {io:?} (all: {seen:?})");
    }
}

#[test]
fn the_binary_is_argument_parsing_and_wiring() {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("src"), &mut files);
    for f in files {
        let lines = std::fs::read_to_string(&f).unwrap().lines().count();
        assert!(
            lines <= 160,
            "{} has {lines} lines: move the logic into a library crate",
            f.display()
        );
    }
}
