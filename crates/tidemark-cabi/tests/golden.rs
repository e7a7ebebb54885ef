//! The golden fixtures (`tests/fixtures/golden.tdm`, `golden-bids.jsonl`,
//! `golden-scores.jsonl`): a checkpoint with crosses and every transform,
//! bids that reach every hashing rule, and the scores they must get. A port
//! of the scorer to another language checks itself against them; here the
//! Rust scorer, this C ABI, a C program and the Python ctypes example must
//! all give exactly those scores. `TIDEMARK_BLESS=1` rewrites them (only
//! when the format changes on purpose: old files must keep scoring).

// Calls the C ABI as C does.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tidemark_cabi::*;
use tidemark_checkpoint::{Candidate, Checkpoint, Scorer, Target, Tuning};
use tidemark_features::{Hashing, Transform};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

const BIDS: &[&str] = &[
    r#"{}"#,
    r#"{"app":"app1","campaign":"c3","country":"us","exchange":"adx","os":"android"}"#,
    r#"{"app":"app2","country":"br","exchange":"mopub","os":"ios","wifi":true}"#,
    r#"{"country":"us","wifi":false,"clk_1h":0}"#,
    r#"{"clk_1h":3.5,"price":-2,"imp_1d":0.5}"#,
    r#"{"clk_1h":-7,"price":99.25,"imp_1d":1}"#,
    r#"{"clk_1h":1e30,"price":2.5,"imp_1d":3,"country":"de","exchange":"adx"}"#,
    r#"{"imp_1d":10,"country":"de","exchange":17}"#,
    r#"{"imp_1d":1e9,"n":42,"ratio":0.125,"country":"日本","exchange":"ünï"}"#,
    r#"{"app":"","list":[1,2],"obj":{"a":1},"none":null,"os":"ios"}"#,
    r#"{"country":true,"exchange":false}"#,
    r#"{"country":2,"exchange":0.5,"price":4}"#,
    // Out of range (SPEC 10, v1.3): left out of the row, the rest scored.
    r#"{"n":9.2e18,"app":"app1","country":"us"}"#,
    r#"{"n":-1e308,"ratio":1e15,"price":1e308,"clk_1h":-1e308}"#,
    r#"{"country":1e300,"exchange":0,"ratio":1.0000001e15}"#,
    r#"{"country":4e7,"exchange":3e7,"n":3.4e38}"#,
];

/// Deterministic weights: every target, most slots, both signs.
fn golden() -> Checkpoint {
    let hashing = Hashing::new(8, 42, vec![("country".into(), "exchange".into())]).with_transforms(
        BTreeMap::from([
            ("clk_1h".to_owned(), Transform::Log1p),
            ("price".to_owned(), Transform::Clip { min: 0.0, max: 5.0 }),
            (
                "imp_1d".to_owned(),
                Transform::Buckets(vec![1.0, 3.0, 10.0]),
            ),
        ]),
    );
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let targets = ["ctr", "cvr_short", "cvr_long"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let weights = (0..hashing.slots() as u32)
                .filter_map(|i| {
                    let r = next();
                    (r % 4 != 0).then(|| (i, ((r >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0))
                })
                .collect();
            Target {
                name: (*name).to_owned(),
                alpha: 0.1,
                beta: 1.0,
                l1: 1.0,
                l2: 1.0,
                trained: 1000,
                margin: [-2.0, -1.0, 0.0][i],
                labels: Some((1000, [119, 269, 500][i])),
                early_labels: None,
                weights,
                state: Vec::new(),
                metrics: serde_json::json!({}),
                tuning: None,
                pool: None,
            }
        })
        .collect();
    Checkpoint {
        hashing,
        targets,
        pools: Vec::new(),
        positions: BTreeMap::from([("golden/s0".to_owned(), 1000)]),
        created_at_ms: 1_795_000_000_000,
    }
}

fn expected() -> Vec<Value> {
    expected_in("golden-scores.jsonl")
}

fn expected_in(file: &str) -> Vec<Value> {
    std::fs::read_to_string(fixtures().join(file))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `tidemark_score_json` of `bid` through scorer `s`, as C calls it: the
/// text written and the length returned.
fn score_json(s: *mut TidemarkScorer, bid: &str) -> (String, i64) {
    let bid_c = CString::new(bid).unwrap();
    let (mut text, mut err) = ([0 as c_char; 512], [0 as c_char; 256]);
    let n = unsafe {
        tidemark_score_json(
            s,
            bid_c.as_ptr(),
            text.as_mut_ptr(),
            text.len(),
            err.as_mut_ptr(),
            err.len(),
        )
    };
    let got = unsafe { CStr::from_ptr(text.as_ptr()) }.to_str().unwrap();
    (got.to_owned(), n as i64)
}

/// The Rust scorer's answer to each of [`BIDS`] from the file at `path`,
/// one JSON line each: what `TIDEMARK_BLESS` records.
fn score_lines(path: &Path) -> String {
    let scorer = Scorer::open(path).unwrap();
    let lines: Vec<String> = (BIDS.iter())
        .map(|b| {
            (scorer.score(&serde_json::from_str(b).unwrap()))
                .to_json()
                .to_string()
        })
        .collect();
    lines.join("\n") + "\n"
}

#[test]
fn the_golden_checkpoint_is_stable_and_scores_as_recorded() {
    let c = golden();
    let path = fixtures().join("golden.tdm");
    if std::env::var_os("TIDEMARK_BLESS").is_some() {
        std::fs::write(&path, c.to_bytes()).unwrap();
        std::fs::write(fixtures().join("golden-bids.jsonl"), BIDS.join("\n") + "\n").unwrap();
        std::fs::write(fixtures().join("golden-scores.jsonl"), score_lines(&path)).unwrap();
    }
    // The writer still writes the file byte for byte, and the file reads back.
    assert_eq!(
        std::fs::read(&path).unwrap(),
        c.to_bytes(),
        "golden.tdm changed"
    );
    let bids = std::fs::read_to_string(fixtures().join("golden-bids.jsonl")).unwrap();
    assert_eq!(bids.lines().collect::<Vec<_>>(), BIDS);
    let scorer = Scorer::open(&path).unwrap();
    for (bid, want) in BIDS.iter().zip(expected()) {
        let got = scorer.score(&serde_json::from_str(bid).unwrap()).to_json();
        assert_eq!(got, want, "{bid}");
    }
}

/// The golden checkpoint as a self-tuning learner writes it: the
/// same weights, every target with a grid whose other settings' state a
/// bidder must skip. It scores exactly as `golden.tdm`.
fn tuned() -> Checkpoint {
    let mut c = golden();
    for (k, t) in c.targets.iter_mut().enumerate() {
        t.state = vec![(3, -1.5, 2.0), (200, 0.25, 9.0)];
        let candidate = |alpha: f64, state: Vec<(u32, f32, f32)>| Candidate {
            alpha,
            beta: 1.0,
            l1: 1.0,
            l2: 1.0,
            loss: 12.5 + alpha,
            state,
        };
        t.tuning = Some(Tuning {
            half_life: 20_000.0,
            decayed_rows: 999.5,
            chosen: 1,
            switches: k as u64,
            last_switch: (k > 0).then_some(400),
            candidates: vec![
                candidate(0.025, vec![(0, 1.0, 1.0), (7, -2.0, 4.0)]),
                candidate(0.1, Vec::new()),
                candidate(0.4, vec![(256, 0.5, 0.25)]),
            ],
        });
    }
    c
}

#[test]
fn the_tuned_golden_checkpoint_scores_as_the_plain_one() {
    let c = tuned();
    let path = fixtures().join("golden-tuned.tdm");
    if std::env::var_os("TIDEMARK_BLESS").is_some() {
        std::fs::write(&path, c.to_bytes()).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes, c.to_bytes(), "golden-tuned.tdm changed");
    assert_eq!(bytes[8], 4, "format version 4");
    let scorer = Scorer::open(&path).unwrap();
    for (bid, want) in BIDS.iter().zip(expected()) {
        let got = scorer.score(&serde_json::from_str(bid).unwrap()).to_json();
        assert_eq!(got, want, "{bid}");
    }
}

/// The golden checkpoint with `cvr_short` and `cvr_long` pooled (format
/// version 5): a pool with weights of its own at most slots, both signs,
/// which each pooled target adds to its own; `ctr` is not pooled.
fn pooled() -> Checkpoint {
    let mut c = golden();
    let weights = (0..c.hashing.slots() as u32)
        .filter(|i| i % 3 != 0)
        .map(|i| (i, (i * 37 % 101) as f32 / 50.0 - 1.0))
        .collect();
    c.pools.push(Target {
        name: "install".into(),
        margin: 0.0,
        labels: None,
        metrics: Value::Null,
        weights,
        ..c.targets[0].clone()
    });
    for t in &mut c.targets[1..] {
        t.pool = Some("install".into());
    }
    c
}

/// The fixture `file` and its answers `scores` as `c` gives them (both
/// rewritten under `TIDEMARK_BLESS`), checked byte for byte and for its
/// format `version`: its path.
fn recorded(c: &Checkpoint, file: &str, scores: &str, version: u8) -> PathBuf {
    let path = fixtures().join(file);
    if std::env::var_os("TIDEMARK_BLESS").is_some() {
        std::fs::write(&path, c.to_bytes()).unwrap();
        std::fs::write(fixtures().join(scores), score_lines(&path)).unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes, c.to_bytes(), "{file} changed");
    assert_eq!(bytes[8], version, "format version {version}");
    path
}

/// The C ABI's scorer of the checkpoint at `path` (free it with
/// `tidemark_free`).
fn opened(path: &Path) -> *mut TidemarkScorer {
    let path_c = CString::new(path.to_str().unwrap()).unwrap();
    let mut err = [0 as c_char; 256];
    let s = unsafe { tidemark_open(path_c.as_ptr(), err.as_mut_ptr(), err.len()) };
    assert!(!s.is_null());
    s
}

#[test]
fn the_pooled_golden_checkpoint_scores_as_recorded_through_rust_and_the_c_abi() {
    let path = recorded(
        &pooled(),
        "golden-pooled.tdm",
        "golden-pooled-scores.jsonl",
        5,
    );
    let (want, plain) = (expected_in("golden-pooled-scores.jsonl"), expected());
    let (scorer, s) = (Scorer::open(&path).unwrap(), opened(&path));
    let mut moved = 0;
    for ((bid, want), plain) in BIDS.iter().zip(&want).zip(&plain) {
        let got = scorer.score(&serde_json::from_str(bid).unwrap()).to_json();
        assert_eq!(&got, want, "{bid}");
        // The pool moves only the targets that name it (the score of a
        // bid clamped at the bound moves not at all).
        assert_eq!(got["ctr"], plain["ctr"], "{bid}");
        moved += usize::from(got["cvr_long"] != plain["cvr_long"]);
        let (abi, n) = score_json(s, bid);
        assert_eq!(n as usize, abi.len());
        assert_eq!(&serde_json::from_str::<Value>(&abi).unwrap(), want, "{bid}");
    }
    unsafe { tidemark_free(s) };
    assert!(moved >= BIDS.len() - 2, "the pool moved {moved} scores");
}

/// The pooled golden checkpoint with two targets leaving features out
/// (format version 6): `cvr_long` omits `exchange` (so the cross of
/// `country` and `exchange` too), `cvr_short` a transformed number.
fn omitting() -> Checkpoint {
    let mut c = pooled();
    let omit = BTreeMap::from([
        ("cvr_long".to_owned(), ["exchange".to_owned()].into()),
        ("cvr_short".to_owned(), ["clk_1h".to_owned()].into()),
    ]);
    c.hashing = c.hashing.clone().with_omit(omit);
    c
}

#[test]
fn the_omitting_golden_checkpoint_scores_as_recorded_through_rust_and_the_c_abi() {
    let path = recorded(
        &omitting(),
        "golden-omit.tdm",
        "golden-omit-scores.jsonl",
        6,
    );
    let (want, pooled) = (
        expected_in("golden-omit-scores.jsonl"),
        expected_in("golden-pooled-scores.jsonl"),
    );
    let (scorer, s) = (Scorer::open(&path).unwrap(), opened(&path));
    let mut moved = 0;
    for ((bid, want), pooled) in BIDS.iter().zip(&want).zip(&pooled) {
        let got = scorer.score(&serde_json::from_str(bid).unwrap()).to_json();
        assert_eq!(&got, want, "{bid}");
        // Only a target that omits a feature the bid has scores otherwise.
        let has = |n: &str| bid.contains(&format!("\"{n}\""));
        assert_eq!(got["ctr"], pooled["ctr"], "{bid}");
        if !has("exchange") {
            assert_eq!(got["cvr_long"], pooled["cvr_long"], "{bid}");
        }
        if !has("clk_1h") {
            assert_eq!(got["cvr_short"], pooled["cvr_short"], "{bid}");
        }
        moved += usize::from(got["cvr_long"] != pooled["cvr_long"]);
        let (abi, n) = score_json(s, bid);
        assert_eq!(n as usize, abi.len());
        assert_eq!(&serde_json::from_str::<Value>(&abi).unwrap(), want, "{bid}");
    }
    unsafe { tidemark_free(s) };
    assert!(moved >= 4, "omitting exchange moved {moved} scores");
}

#[test]
fn files_of_older_versions_keep_scoring_as_recorded() {
    // golden-v2.tdm and golden-tuned-v3.tdm are golden.tdm and
    // golden-tuned.tdm as versions 2 and 3 wrote them: a bidder's old file
    // still loads and scores every bid as the newest reader does (the
    // bound on values applies to them too).
    for file in ["golden-v2.tdm", "golden-tuned-v3.tdm"] {
        let bytes = std::fs::read(fixtures().join(file)).unwrap();
        assert!(bytes[8] < 4, "{file} is an older version");
        let scorer = Scorer::open(&fixtures().join(file)).unwrap();
        for (bid, want) in BIDS.iter().zip(expected()) {
            let got = scorer.score(&serde_json::from_str(bid).unwrap()).to_json();
            assert_eq!(got, want, "{file}: {bid}");
        }
    }
}

#[test]
fn the_c_abi_gives_the_golden_scores() {
    let path = CString::new(fixtures().join("golden.tdm").to_str().unwrap()).unwrap();
    let mut err = [0 as c_char; 256];
    let s = unsafe { tidemark_open(path.as_ptr(), err.as_mut_ptr(), err.len()) };
    assert!(!s.is_null());
    assert_eq!(unsafe { tidemark_created_at_ms(s) }, 1_795_000_000_000);
    let names: Vec<CString> = ["ctr", "cvr_short", "cvr_long", "p_install", "nope"]
        .iter()
        .map(|n| CString::new(*n).unwrap())
        .collect();
    let ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    for (bid, want) in BIDS.iter().zip(expected()) {
        let bid_c = CString::new(*bid).unwrap();
        let mut out = [0f64; 5];
        let rc = unsafe {
            tidemark_score(
                s,
                bid_c.as_ptr(),
                ptrs.as_ptr(),
                5,
                out.as_mut_ptr(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        assert_eq!(rc, 0);
        for (i, k) in ["ctr", "cvr_short", "cvr_long", "p_install"]
            .iter()
            .enumerate()
        {
            assert_eq!(out[i], want[k].as_f64().unwrap(), "{k} of {bid}");
        }
        assert!(out[4].is_nan(), "a name the checkpoint lacks");
        let (got, n) = score_json(s, bid);
        assert_eq!(n as usize, got.len());
        assert_eq!(serde_json::from_str::<Value>(&got).unwrap(), want);
    }
    // Errors come back as -1 and a reason, never a crash.
    let bad = CString::new("[1,2]").unwrap();
    let mut small = [0 as c_char; 4];
    let fine = CString::new("{}").unwrap();
    unsafe {
        assert_eq!(
            tidemark_score_json(
                s,
                bad.as_ptr(),
                small.as_mut_ptr(),
                4,
                err.as_mut_ptr(),
                err.len()
            ),
            -1
        );
        assert!(CStr::from_ptr(err.as_ptr())
            .to_str()
            .unwrap()
            .contains("JSON object"));
        assert_eq!(
            tidemark_score_json(s, fine.as_ptr(), small.as_mut_ptr(), 4, err.as_mut_ptr(), 8),
            -1
        );
        assert_eq!(
            CStr::from_ptr(err.as_ptr()).to_bytes().len(),
            7,
            "truncated to err_len"
        );
        assert_eq!(
            tidemark_score(
                s,
                std::ptr::null(),
                ptrs.as_ptr(),
                1,
                [0f64].as_mut_ptr(),
                err.as_mut_ptr(),
                err.len()
            ),
            -1
        );
        assert_eq!(
            tidemark_reload(std::ptr::null(), err.as_mut_ptr(), err.len()),
            -1
        );
        let missing = CString::new("/nonexistent/x.tdm").unwrap();
        assert!(tidemark_open(missing.as_ptr(), err.as_mut_ptr(), err.len()).is_null());
        assert!(CStr::from_ptr(err.as_ptr())
            .to_str()
            .unwrap()
            .contains("/nonexistent/x.tdm"));
        assert_eq!(tidemark_reload(s, err.as_mut_ptr(), err.len()), 0);
        tidemark_free(s);
        tidemark_free(std::ptr::null_mut());
    }
}

/// `target/<profile>/deps`, where `cargo test` builds `libtidemark_cabi.so`
/// beside these tests (`cargo build` copies it up to `target/<profile>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_owned()
}

fn answers(out: std::process::Output, who: &str) -> Vec<Value> {
    assert!(
        out.status.success(),
        "{who}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{who}: {l:?}: {e}")))
        .collect()
}

#[test]
fn python_and_c_programs_score_the_golden_bids_through_the_library() {
    let lib = profile_dir().join("libtidemark_cabi.so");
    assert!(lib.exists(), "{} not built", lib.display());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (file, scores) in [
        ("golden.tdm", "golden-scores.jsonl"),
        ("golden-pooled.tdm", "golden-pooled-scores.jsonl"),
        ("golden-omit.tdm", "golden-omit-scores.jsonl"),
    ] {
        programs_score(&lib, &root, &fixtures().join(file), &expected_in(scores));
    }
}

/// `examples/score.py` and `examples/score.c` score the golden bids with
/// `ckpt` as `expected` says.
fn programs_score(lib: &Path, root: &Path, ckpt: &Path, expected: &[Value]) {
    let bids = std::fs::File::open(fixtures().join("golden-bids.jsonl")).unwrap();
    let py = Command::new("python3")
        .arg(root.join("examples/score.py"))
        .args([
            "--lib",
            lib.to_str().unwrap(),
            "--checkpoint",
            ckpt.to_str().unwrap(),
        ])
        .stdin(bids)
        .output()
        .expect("python3");
    assert_eq!(answers(py, "score.py"), expected);

    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("score-c");
    let cc = Command::new("cc")
        .arg(root.join("examples/score.c"))
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
        .arg("-L")
        .arg(profile_dir())
        .args(["-ltidemark_cabi", "-o"])
        .arg(&exe)
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let bids = std::fs::File::open(fixtures().join("golden-bids.jsonl")).unwrap();
    let c = Command::new(&exe)
        .arg(ckpt)
        .env("LD_LIBRARY_PATH", profile_dir())
        .stdin(bids)
        .output()
        .unwrap();
    assert_eq!(answers(c, "score.c"), expected);
}
