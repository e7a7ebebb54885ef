//! Guardrails on the code's shape that cost nothing to keep: SQL only in
//! `store` modules, bidder-facing crates free of IO dependencies, the crate table of
//! docs/ARCHITECTURE.md equal to the dependency graph, a thin binary.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// SQL is written in `sql/` (the schema) and in modules named `store`: the
/// crate `tidemark-store` (what every owner shares) and `src/store.rs` or
/// `src/store/` of each crate that owns tables or reads them. No exceptions:
/// a crate that needs SQL gets a `store` module.
fn sql_may_live_in(rel: &Path) -> bool {
    rel.starts_with("crates/tidemark-store")
        || rel
            .components()
            .zip(rel.components().skip(1))
            .any(|(a, b)| {
                a.as_os_str() == "src" && (b.as_os_str() == "store" || b.as_os_str() == "store.rs")
            })
}

/// Crates bidders and publishers link: no runtime, socket, database or
/// compression dependency may reach them, however indirectly.
const BIDDER_FACING: [&str; 7] = [
    "tidemark-wire",
    "tidemark-person",
    "tidemark-plan",
    "tidemark-features",
    "tidemark-checkpoint",
    "tidemark-cabi",
    "tidemark-ftrl",
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
    // COPY's own word is common English in output; its SQL always says this.
    "FROM STDIN",
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
fn sql_lives_only_in_store_modules() {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("src"), &mut files);
    rust_files(&Path::new(ROOT).join("crates"), &mut files);
    let root = Path::new(ROOT);
    files.retain(|f| !sql_may_live_in(f.strip_prefix(root).unwrap()));
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
        "SQL outside sql/ and store modules; move it into its crate's store module:\n{}",
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
    assert_eq!(sql_in(r#"  println!("COPY ceiling {n}")"#), None);
    assert_eq!(
        sql_in(r#"  c.copy_in("COPY t FROM STDIN (FORMAT binary)")"#),
        Some("FROM STDIN")
    );
    for (path, ok) in [
        ("crates/tidemark-store/src/lib.rs", true),
        ("crates/tidemark-shard/src/store/buffer.rs", true),
        ("crates/tidemark-reader/src/store.rs", true),
        ("crates/tidemark-shard/src/writer/flush.rs", false),
        ("crates/tidemark-bench/src/main.rs", false),
        ("src/main.rs", false),
    ] {
        assert_eq!(sql_may_live_in(Path::new(path)), ok, "{path}");
    }
}

/// The workspace's dependency graph, as `cargo metadata` resolves it.
struct Graph {
    /// Package id to name.
    name_of: HashMap<String, String>,
    /// Package id to its normal (not dev, not build) dependencies' ids.
    deps: HashMap<String, Vec<String>>,
    /// Ids of the workspace's members.
    members: Vec<String>,
}

impl Graph {
    fn load() -> Graph {
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
        let s = |v: &serde_json::Value| v.as_str().unwrap().to_owned();
        let name_of = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (s(&p["id"]), s(&p["name"])))
            .collect();
        let deps = meta["resolve"]["nodes"]
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
                    .map(|d| s(&d["pkg"]))
                    .collect();
                (s(&n["id"]), normal)
            })
            .collect();
        let members = meta["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .map(s)
            .collect();
        Graph {
            name_of,
            deps,
            members,
        }
    }

    fn id(&self, krate: &str) -> &str {
        self.name_of
            .iter()
            .find(|(_, n)| *n == krate)
            .map(|(id, _)| id.as_str())
            .unwrap_or_else(|| panic!("{krate} is in the workspace"))
    }

    /// Names of everything `krate` links, however indirectly.
    fn closure(&self, krate: &str) -> BTreeSet<&str> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![self.id(krate)];
        while let Some(id) = todo.pop() {
            if seen.insert(self.name_of[id].as_str()) {
                todo.extend(self.deps.get(id).into_iter().flatten().map(String::as_str));
            }
        }
        seen.remove(krate);
        seen
    }

    /// The workspace crates `krate` depends on directly (normal dependencies).
    fn direct(&self, krate: &str) -> BTreeSet<&str> {
        self.deps[self.id(krate)]
            .iter()
            .filter(|d| self.members.contains(*d))
            .map(|d| self.name_of[d].as_str())
            .collect()
    }
}

#[test]
fn bidder_facing_crates_have_no_io_dependency() {
    let graph = Graph::load();
    for krate in BIDDER_FACING {
        let seen = graph.closure(krate);
        let io: Vec<&&str> = IO_CRATES.iter().filter(|c| seen.contains(**c)).collect();
        assert!(io.is_empty(), "{krate} depends on {io:?} (all: {seen:?})");
    }
}

/// One row of the crate table in docs/ARCHITECTURE.md.
struct Row {
    krate: String,
    layer: u32,
    depends_on: BTreeSet<String>,
    links: [bool; 3],
}

fn crate_table() -> Vec<Row> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("docs/ARCHITECTURE.md")).unwrap();
    let yes = |c: &str| match c {
        "yes" => true,
        "no" => false,
        other => panic!("{other:?}: a cell of the crate table is yes or no"),
    };
    text.lines()
        .filter(|l| l.starts_with("| `tidemark"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let krate = cells[1].trim_matches('`').to_owned();
            let layer = cells[2].split(' ').next().unwrap().parse().unwrap();
            let depends_on = match cells[3] {
                "—" => BTreeSet::new(),
                list => list.split(", ").map(|d| format!("tidemark-{d}")).collect(),
            };
            Row {
                krate,
                layer,
                depends_on,
                links: [yes(cells[4]), yes(cells[5]), yes(cells[6])],
            }
        })
        .collect()
}

#[test]
fn the_crate_table_is_the_dependency_graph() {
    let graph = Graph::load();
    let table = crate_table();
    let mut members: Vec<&str> = graph
        .members
        .iter()
        .map(|id| graph.name_of[id].as_str())
        .collect();
    members.sort();
    let mut rows: Vec<&str> = table.iter().map(|r| r.krate.as_str()).collect();
    rows.sort();
    assert_eq!(rows, members, "one row per workspace crate");
    let layer: HashMap<&str, u32> = table.iter().map(|r| (r.krate.as_str(), r.layer)).collect();
    for row in &table {
        let k = row.krate.as_str();
        let direct: BTreeSet<String> = graph.direct(k).into_iter().map(str::to_owned).collect();
        assert_eq!(
            direct, row.depends_on,
            "{k}: its dependencies as the table says"
        );
        for d in &direct {
            assert!(
                layer[d.as_str()] < row.layer,
                "{k} (layer {}) depends on {d} (layer {}): only lower layers",
                row.layer,
                layer[d.as_str()]
            );
        }
        let closure = graph.closure(k);
        for (io, links) in ["zmq", "tokio-postgres", "tokio"].iter().zip(row.links) {
            assert_eq!(
                closure.contains(io),
                links,
                "{k}: links {io} as the table says"
            );
        }
    }
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    for k in members.iter().filter(|k| **k != "tidemark") {
        assert!(
            readme.contains(&format!("`crates/{k}`")),
            "README's layout names crates/{k}"
        );
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

/// End-to-end test files stay readable (one subject each, under ~600
/// lines) and take helpers only from `tidemark-testkit`, never from each
/// other: a file's helpers that two subjects need belong in the kit.
#[test]
fn e2e_files_are_small_and_share_only_the_kit() {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("tests/e2e"), &mut files);
    assert!(files.len() > 10, "scanned {} files", files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines = text.lines().count();
        assert!(
            lines <= 650,
            "{} has {lines} lines: split it by subject",
            f.display()
        );
        // `super::` (a subject's own directory) is allowed; `crate::` reaches
        // into another subject.
        if let Some(l) = text.lines().find(|l| l.contains("crate::")) {
            panic!(
                "{} takes {l:?} from another test file; move the helper into tidemark-testkit",
                f.display()
            );
        }
    }
}

/// docs/ARCHITECTURE.md names only what exists: every file it names
/// (`….rs`, `.sh`, `.py`, `.sql`, `.toml`, `.md`), every module a crate's
/// section defines as a list item (`- \`name\`:`), and every
/// `tidemark-bench` subcommand, all of them.
#[test]
fn the_architecture_names_only_what_exists() {
    let root = Path::new(ROOT);
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    all_files(root, &mut files);
    let spans: Vec<&str> = text.split('`').skip(1).step_by(2).collect();
    let named_file = |s: &&&str| {
        [".rs", ".sh", ".py", ".sql", ".toml", ".md"]
            .iter()
            .any(|e| s.ends_with(e))
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-/.".contains(c))
    };
    for span in spans.iter().filter(named_file) {
        assert!(
            files.iter().any(|f| f.ends_with(span)),
            "docs/ARCHITECTURE.md names `{span}`, which no file is"
        );
    }
    let mut krate = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("### `crates/") {
            krate = rest.split('`').next().map(str::to_owned);
        } else if line.starts_with("### ") {
            krate = None;
        }
        let (Some(k), Some(rest)) = (&krate, line.strip_prefix("- `")) else {
            continue;
        };
        let Some((name, _)) = rest.split_once("`:") else {
            continue;
        };
        let module = root.join("crates").join(k).join("src").join(name);
        assert!(
            module.with_extension("rs").exists() || module.is_dir(),
            "docs/ARCHITECTURE.md's {k} section defines module `{name}`, which is not there"
        );
    }
    let listed: BTreeSet<String> = spans
        .iter()
        .find_map(|s| {
            s.strip_prefix("tidemark-bench ")
                .filter(|r| r.contains('|'))
        })
        .expect("ARCHITECTURE lists the bench subcommands")
        .split('|')
        .map(|s| s.trim().to_owned())
        .collect();
    let main = std::fs::read_to_string(root.join("crates/tidemark-bench/src/main.rs")).unwrap();
    let body = main.split("enum Bench {").nth(1).expect("enum Bench");
    let body = &body[..body.find("\n}").expect("its end")];
    let defined: BTreeSet<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            let ident: String = l
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            // CamelCase as clap names it: kebab-case.
            let mut kebab = String::new();
            for (i, c) in ident.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    kebab.push('-');
                }
                kebab.push(c.to_ascii_lowercase());
            }
            kebab
        })
        .collect();
    assert_eq!(listed, defined, "the bench subcommands ARCHITECTURE lists");
}

/// Every file under `dir` but build output and VCS data.
fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        if path.is_dir() {
            all_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The binary's `src/` and every crate's.
fn source_dirs() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut dirs = vec![root.join("src")];
    for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        dirs.push(e.path().join("src"));
    }
    dirs
}

/// A source file's module path in its crate (`src/a/b.rs` and
/// `src/a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` the root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// The paths a file's code names from its own crate: `use` items (one
/// level of braces expanded) and inline `crate::…` and `super::…` paths,
/// each as its segments, `self`/`super` resolved against `me`.
fn paths_named(text: &str, me: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut resolve = |segs: Vec<&str>| {
        let (mut base, rest): (Vec<String>, &[&str]) = match segs.first() {
            Some(&"crate") => (Vec::new(), &segs[1..]),
            Some(&"self") => (me.to_vec(), &segs[1..]),
            Some(&"super") => {
                let mut b = me.to_vec();
                let mut i = 0;
                while segs.get(i) == Some(&"super") {
                    b.pop();
                    i += 1;
                }
                (b, &segs[i..])
            }
            Some(first) if children.contains(*first) => (me.to_vec(), &segs[..]),
            _ => return,
        };
        base.extend(rest.iter().map(|s| s.to_string()));
        out.push(base);
    };
    // `use` items.
    for item in text.split("use ").skip(1) {
        let Some(end) = item.find(';') else { continue };
        let item: String = item[..end].split_whitespace().collect();
        let (prefix, inner) = match item.split_once('{') {
            Some((p, rest)) => (p.trim_end_matches(':'), rest.trim_end_matches('}')),
            None => (item.as_str(), ""),
        };
        if !prefix.chars().all(|c| ident(c) || c == ':') {
            continue;
        }
        let head: Vec<&str> = prefix.split("::").filter(|s| !s.is_empty()).collect();
        if inner.is_empty() {
            resolve(head);
            continue;
        }
        for part in inner.split(',') {
            let first = part.split(['{', ' ']).next().unwrap_or("");
            let mut segs = head.clone();
            segs.extend(first.split("::").filter(|s| !s.is_empty() && *s != "*"));
            resolve(segs);
        }
    }
    // Inline paths.
    for start in ["crate::", "super::"] {
        for (at, _) in text.match_indices(start) {
            if text[..at].chars().next_back().is_some_and(ident) {
                continue;
            }
            let rest = &text[at..];
            let end = rest
                .find(|c: char| !(ident(c) || c == ':'))
                .unwrap_or(rest.len());
            resolve(rest[..end].split("::").filter(|s| !s.is_empty()).collect());
        }
    }
    out
}

/// No two modules of a crate name each other, a module and its own parent
/// aside (a parent declares its parts, and they name what it owns): two
/// sibling files that use each other are one concern split in two, or two
/// tangled, and neither can be read alone.
#[test]
fn no_two_modules_import_each_other() {
    let mut cycles = Vec::new();
    for src in source_dirs() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
        let mut edges: BTreeSet<(Vec<String>, Vec<String>)> = BTreeSet::new();
        for f in &files {
            let me = module_of(&src, f);
            let text = std::fs::read_to_string(f).unwrap();
            // What only tests or comments name is not the module's dependency.
            let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let text: String = (text.lines())
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let children: BTreeSet<String> = modules
                .iter()
                .filter(|m| m.len() == me.len() + 1 && m.starts_with(&me))
                .map(|m| m[me.len()].clone())
                .collect();
            for path in paths_named(&text, &me, &children) {
                // The longest prefix that is a module of this crate.
                let named = (0..=path.len())
                    .rev()
                    .map(|k| path[..k].to_vec())
                    .find(|p| modules.contains(p));
                if let Some(named) = named.filter(|n| *n != me) {
                    edges.insert((me.clone(), named));
                }
            }
        }
        for (a, b) in &edges {
            let kin = a.len().abs_diff(b.len()) == 1 && (a.starts_with(b) || b.starts_with(a));
            if !kin && a < b && edges.contains(&(b.clone(), a.clone())) {
                cycles.push(format!(
                    "{}: {} and {}",
                    src.display(),
                    a.join("::"),
                    b.join("::")
                ));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "modules that name each other (move what both need into one of them or a third):\n{}",
        cycles.join("\n")
    );
}

/// Every source file of the workspace's crates and binary, with its text up
/// to its in-file test module.
fn sources_without_tests() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for dir in source_dirs() {
        rust_files(&dir, &mut files);
    }
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text
                .split("\n#[cfg(test)]\nmod ")
                .next()
                .unwrap()
                .to_owned();
            (f, code)
        })
        .collect()
}

/// How a function's first line starts, after its indentation.
const FN_STARTS: [&str; 14] = [
    "fn ",
    "pub fn ",
    "async fn ",
    "pub async fn ",
    "pub(crate) fn ",
    "pub(crate) async fn ",
    "pub(super) fn ",
    "pub(super) async fn ",
    "const fn ",
    "pub const fn ",
    "unsafe fn ",
    "pub unsafe fn ",
    "pub extern \"C\" fn ",
    "pub unsafe extern \"C\" fn ",
];

/// Rooms stay small enough to read whole: no source file over 700 lines
/// (its in-file test module aside; files only tests compile count), no
/// function over 120 lines outside a test module.
#[test]
fn files_and_functions_stay_readable() {
    let mut long = Vec::new();
    for (f, code) in sources_without_tests() {
        let lines: Vec<&str> = code.lines().collect();
        if lines.len() > 700 {
            long.push(format!("{}: {} lines", f.display(), lines.len()));
        }
        // A function runs from its `fn` line to the first line that closes
        // it at the same indentation.
        for (i, l) in lines.iter().enumerate() {
            let body = l.trim_start();
            let indent = &l[..l.len() - body.len()];
            let is_fn = FN_STARTS.iter().any(|p| body.starts_with(p));
            if !is_fn || body.ends_with(';') {
                continue;
            }
            let close = format!("{indent}}}");
            let end = (i..lines.len()).find(|&j| lines[j] == close);
            if let Some(end) = end.filter(|&end| end - i + 1 > 120) {
                long.push(format!(
                    "{}:{}: a function of {} lines",
                    f.display(),
                    i + 1,
                    end - i + 1
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these by concern:\n{}",
        long.join("\n")
    );
}
