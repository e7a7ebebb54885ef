//! `tidemark export`, then `tidemark learn --input` over what it wrote: the
//! offline pass learns what the online learner learned, weight for weight,
//! pools and early rows included.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use tidemark_checkpoint::Checkpoint;
use tidemark_testkit::{bin, run_ok, wait_for, TestDb};

use super::{config, insert, latest, settings, start, workdir};

/// `tidemark export --target TARGETS` of the database at `url` into `out`.
fn export(url: &str, targets: &str, out: &str, more: &[&str]) {
    let args = [
        "export",
        "--target",
        targets,
        "--database-url",
        url,
        "--output",
        out,
    ];
    run_ok(&[&args[..], more].concat());
}

#[test]
fn export_then_learn_offline() {
    let db = TestDb::new("export");
    insert(&db, "a", 0, 2000);
    let dir = workdir("export");
    let tsv = dir.join("ctr.tsv");
    let tsv_s = tsv.to_str().unwrap();
    export(&db.url, "ctr", tsv_s, &[]);
    let text = std::fs::read_to_string(&tsv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("label\tapp\tn:num\tos\twifi"));
    assert_eq!(lines.count(), 2000);
    let preds = dir.join("preds");
    let learn = [
        "learn", "--input", tsv_s, "--header", "--json", "--cross", "app,os",
    ];
    let out = run_ok(&[&learn[..], &["--predictions", preds.to_str().unwrap()]].concat());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["rows"], 2000);
    assert!(report["logloss"].as_f64().unwrap() < std::f64::consts::LN_2);
    assert_eq!(
        std::fs::read_to_string(&preds).unwrap().lines().count(),
        2000
    );
    // A bad label is a clear error naming the line.
    let bad = dir.join("bad.tsv");
    std::fs::write(&bad, "1\ta\n2\tb\n").unwrap();
    let out = bin()
        .args(["learn", "--input", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.tsv:2: label must be 0 or 1"));
}

#[test]
fn offline_learning_over_an_export_equals_online_learning_weight_for_weight() {
    // The same rows in the same order, the same hashing (a numeric column
    // through a transform, a cross) and settings: the online learner's ctr
    // model and the offline pass's saved model must hold identical weights.
    let db = TestDb::new("offline_equal");
    insert(&db, "a", 0, 1500);
    let dir = workdir("equal");
    let cfg = config(&dir, &db);
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}\n[transforms]\nn = \"log1p\"\n")).unwrap();
    let mut child = start(&cfg, &dir.join("learn.log"));
    let online = wait_for("every ctr row learned online", || {
        latest(&dir).filter(|c| {
            c.targets
                .iter()
                .any(|t| t.name == "ctr" && t.trained == 1500)
        })
    });
    tidemark_testkit::signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());
    let (tsv, saved) = (dir.join("ctr.tsv"), dir.join("ctr.tdm"));
    let (tsv, saved) = (tsv.to_str().unwrap(), saved.to_str().unwrap());
    export(&db.url, "ctr", tsv, &[]);
    run_ok(&[
        "learn",
        "--input",
        tsv,
        "--header",
        "--bits",
        "16",
        "--cross",
        "app,os",
        "--transform",
        "n=log1p",
        "--save",
        saved,
        "--target",
        "ctr",
    ]);
    let offline = Checkpoint::read(Path::new(saved), true).unwrap();
    let shown: serde_json::Value =
        serde_json::from_slice(&run_ok(&["checkpoint", "show", "--json", saved]).stdout).unwrap();
    assert_eq!(shown["version"], 4);
    assert!(shown["targets"][0]["tuning"].is_object(), "a tuned model");
    assert_eq!(shown["hashing"]["transforms"]["n"]["kind"], "log1p");
    assert_eq!(shown["targets"][0]["trained"], 1500);
    let ok = String::from_utf8(run_ok(&["checkpoint", "verify", saved]).stdout).unwrap();
    assert!(ok.starts_with("ok: "), "{ok}");
    let want = online.targets.iter().find(|t| t.name == "ctr").unwrap();
    assert_eq!(offline.hashing, online.hashing);
    assert_eq!(offline.targets[0].trained, 1500);
    assert_eq!(offline.targets[0].weights, want.weights, "weights differ");
    assert_eq!(offline.targets[0].state, want.state, "resume state differs");
    assert_eq!(offline.targets[0].tuning, want.tuning, "the grid differs");

    // Without the `:num` mark the column would be hashed as strings: a
    // different model (the check above can fail).
    let plain = dir.join("plain.tsv");
    std::fs::write(
        &plain,
        std::fs::read_to_string(tsv)
            .unwrap()
            .replacen("n:num", "n", 1),
    )
    .unwrap();
    let other = dir.join("plain.tdm");
    run_ok(&[
        "learn",
        "--input",
        plain.to_str().unwrap(),
        "--header",
        "--bits",
        "16",
        "--cross",
        "app,os",
        "--transform",
        "n=log1p",
        "--save",
        other.to_str().unwrap(),
    ]);
    let other = Checkpoint::read(&other, true).unwrap();
    // (Its state: on 1,500 rows the grid may still predict the label rate
    // alone, whose weights are all 0 either way.)
    assert_ne!(other.targets[0].state, want.state);
    assert_eq!(other.targets[0].name, "model");

    // A fixed model scores a file without learning: the online checkpoint's
    // ctr model, then the saved one, give the same figures; training on from
    // it moves the state (the labels here owe nothing to the features, so
    // the grid rightly keeps predicting the label rate alone).
    let ckpt = tidemark_checkpoint::latest(&dir.join("ckpt")).unwrap();
    let report = |args: &[&str]| -> serde_json::Value {
        serde_json::from_slice(
            &run_ok(&[&["learn", "--input", tsv, "--header", "--json"], args].concat()).stdout,
        )
        .unwrap()
    };
    let a = report(&[
        "--model",
        ckpt.to_str().unwrap(),
        "--target",
        "ctr",
        "--test-only",
    ]);
    let b = report(&["--model", saved, "--test-only"]);
    assert_eq!(a["logloss"], b["logloss"]);
    assert_eq!(a["rows"], 1500);
    let more = dir.join("more.tdm");
    report(&["--model", saved, "--save", more.to_str().unwrap()]);
    let more = Checkpoint::read(&more, true).unwrap();
    assert_eq!(more.targets[0].trained, 3000);
    assert_ne!(more.targets[0].state, want.state);
    // A checkpoint of several targets needs --target; --bits beside --model is refused.
    for bad in [
        vec!["--model", ckpt.to_str().unwrap()],
        vec!["--model", saved, "--bits", "12"],
    ] {
        let out = bin()
            .args(["learn", "--input", tsv, "--header"])
            .args(&bad)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?} accepted");
    }
    // The saved model scores bids with `tidemark score`, the transform applied.
    let mut score = bin()
        .args(["score", "--checkpoint", saved])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(
        score.stdin.as_mut().unwrap(),
        r#"{{"app":"app0","os":"ios","n":3}}"#
    )
    .unwrap();
    let out = score.wait_with_output().unwrap();
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(line["ctr"].as_f64().is_some(), "{line}");
}

#[test]
fn a_pooled_early_export_learned_offline_equals_online_learning_weight_for_weight() {
    // Three targets as the learner reads them from one shard: cvr_long
    // learned early (a provisional 0 for every member, then its late 1s and
    // final 0s) and pooled as the demo pools it (its pool taught by
    // cvr_short's rows too). `export --target` with all three and `--kinds
    // all`, learned offline with the same pool: every target and the pool
    // hold the online learner's weights.
    let (db, dir, online) = pooled_online("pooled", |c| c);
    let (tsv, saved) = (dir.join("all.tsv"), dir.join("all.tdm"));
    let (tsv, saved) = (tsv.to_str().unwrap(), saved.to_str().unwrap());
    let url = db.url.as_str();
    export(url, "ctr,cvr_short,cvr_long", tsv, &["--kinds", "all"]);
    let header = std::fs::read_to_string(tsv).unwrap();
    let header = header.lines().next().unwrap().to_owned();
    assert_eq!(header, "label\t:target\t:kind\t:txid\tapp\tn:num\tos\twifi");
    let learn = ["learn", "--input", tsv, "--header", "--bits", "16"];
    let pooled = [
        "--cross",
        "app,os",
        "--pool",
        "install=cvr_long",
        "--teachers",
        "install=cvr_short,cvr_long",
    ];
    let out = run_ok(&[&learn[..], &pooled, &["--save", saved, "--json"]].concat());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["targets"]["cvr_long"]["rows"], 1500);
    assert_eq!(report["targets"]["cvr_long"]["provisional"], 1500);
    assert_eq!(report["pools"]["install"]["trained"], 4500);
    // (cvr_long's alpha online is set to the built-in default: offline has
    // no per-target settings.)
    let offline = Checkpoint::read(Path::new(saved), true).unwrap();
    assert_eq!(offline.hashing, online.hashing);
    same_models(&offline, &online);

    // Resumed from the saved models, the lending pool is named by its
    // teachers alone (the checkpoint holds its targets).
    let resume = [
        "learn", "--input", tsv, "--header", "--model", saved, "--json",
    ];
    let out = run_ok(&[&resume[..], &["--teachers", "install=cvr_short,cvr_long"]].concat());
    let resumed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resumed["pools"]["install"]["trained"], 9000);

    // Without the pool cvr_long learns alone: other weights.
    let out = run_ok(&[&learn[..], &["--cross", "app,os", "--json"]].concat());
    let alone: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(alone["pools"], serde_json::json!({}));
    assert_ne!(
        alone["targets"]["cvr_long"]["logloss"],
        report["targets"]["cvr_long"]["logloss"]
    );
    // A pool of one target, or rows without :target under a model of
    // several targets, are refused, saying why.
    let one = ["--pool", "install=cvr_long"];
    let plain = dir.join("plain.tsv");
    export(url, "ctr", plain.to_str().unwrap(), &[]);
    // So are a row whose :target is empty, and teachers of a pool nobody gave.
    let blank = dir.join("blank.tsv");
    std::fs::write(
        &blank,
        format!("{header}\n0\t\tfinal\tx\tapp1\t1\tios\ttrue\n"),
    )
    .unwrap();
    let blank_input = ["learn", "--input", blank.to_str().unwrap(), "--header"];
    let stray = ["--teachers", "other=ctr,cvr_short"];
    for (args, says) in [
        ([&learn[..], &one[..]].concat(), "two members or more"),
        (
            blank_input.to_vec(),
            "blank.tsv:2: the :target column must name a target",
        ),
        (
            [&learn[..], &stray[..]].concat(),
            "other: a pool has a name, a target or more",
        ),
        (
            vec![
                "learn",
                "--input",
                plain.to_str().unwrap(),
                "--header",
                "--model",
                saved,
            ],
            "with --target",
        ),
    ] {
        let out = bin().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    }
}

/// Every target and the pool `install` of `offline` hold what `online`'s
/// do: pool, rows, weights, resume state and grid.
fn same_models(offline: &Checkpoint, online: &Checkpoint) {
    for want in &online.targets {
        let got = offline
            .targets
            .iter()
            .find(|t| t.name == want.name)
            .unwrap();
        assert_eq!(got.pool, want.pool, "{}", want.name);
        assert_eq!(got.trained, want.trained, "{}", want.name);
        assert_eq!(got.weights, want.weights, "{}'s weights differ", want.name);
        assert_eq!(
            got.state, want.state,
            "{}'s resume state differs",
            want.name
        );
        assert_eq!(got.tuning, want.tuning, "{}'s grid differs", want.name);
    }
    let (got, want) = (&offline.pools[0], &online.pools[0]);
    assert_eq!((got.name.as_str(), got.trained), ("install", 4500));
    assert_eq!(got.weights, want.weights, "the pool's weights differ");
    assert_eq!(got.state, want.state, "the pool's resume state differs");
}

/// The rows of `insert(db, "a", 1500, 1500)` and [`early_cvr_long`] in a
/// new database, learned online with `cvr_long` pooled as the demo pools
/// it (its pool taught by `cvr_short`'s rows too) and `more` settings;
/// the learner stopped once every row is learned: the database, the
/// learner's directory and its last checkpoint.
fn pooled_online(
    name: &str,
    more: impl FnOnce(tidemark_testkit::config::Config) -> tidemark_testkit::config::Config,
) -> (TestDb, std::path::PathBuf, Checkpoint) {
    let db = TestDb::new(&format!("offline_{name}"));
    insert(&db, "a", 1500, 1500);
    early_cvr_long(&db);
    let dir = workdir(name);
    let cfg = settings(&dir, &db)
        .set("targets.cvr_long.alpha", 0.1)
        .set("pools.install.targets", ["cvr_long"])
        .set("pools.install.teachers", ["cvr_short", "cvr_long"]);
    let cfg = more(cfg).write(&dir.join("learn.toml"));
    let mut child = start(&cfg, &dir.join("learn.log"));
    let online = wait_for("every row learned online", || {
        latest(&dir).filter(|c| {
            let trained = |n: &str| c.targets.iter().find(|t| t.name == n).map(|t| t.trained);
            trained("ctr") == Some(1500)
                && trained("cvr_short") == Some(1500)
                && trained("cvr_long") == Some(3000)
        })
    });
    tidemark_testkit::signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());
    (db, dir, online)
}

/// `cvr_long` rows as a shard learning it early writes them, after the
/// rows `insert(db, "a", 1500, 1500)` made: a provisional 0 for every
/// member, then its final rows, those labelled 1 as `late`.
fn early_cvr_long(db: &TestDb) {
    tidemark_testkit::block_on({
        let url = db.url.clone();
        async move {
            let c = tidemark_store::connect(&url).await.unwrap();
            c.batch_execute(
                "INSERT INTO tidemark.observations (shard, seq, target, txid, label, kind, features, rate, created_at)
                 SELECT 'a', g, 'cvr_long', md5(g::text || 'a'), 0, 'provisional',
                        jsonb_build_object('app', 'app' || (g % 13), 'os', CASE WHEN g % 2 = 0 THEN 'ios' ELSE 'android' END,
                                           'n', g % 5, 'wifi', g % 4 = 0),
                        0.5, now()
                 FROM generate_series(0::bigint, 1499) g;
                 UPDATE tidemark.observations SET kind = 'late', delay_ms = 1000
                 WHERE target = 'cvr_long' AND kind = 'final' AND label = 1",
            )
            .await
            .unwrap();
        }
    });
}

#[test]
fn a_target_that_omits_a_feature_learns_and_scores_without_it_online_and_offline() {
    // cvr_long leaves `os` out of its rows (`[omit]`, `--omit`), so its
    // cross with `app` goes too; the pool it shares with cvr_short's rows
    // still learns `os` from them. Online and offline hold the same
    // weights, and the file records the omission for bidders.
    let (db, dir, online) = pooled_online("omit", |c| c.set("omit.cvr_long", ["os"]));
    let h = &online.hashing;
    let os = h.name_seed("os");
    let os_slots = [h.categorical(os, b"ios"), h.categorical(os, b"android")];
    // The state holds every coordinate a model has learned, weight or not.
    let has_os = |s: &[(u32, f32, f32)]| s.iter().any(|(i, _, _)| os_slots.contains(i));
    let target = |c: &Checkpoint, n: &str| c.targets.iter().find(|t| t.name == n).unwrap().clone();
    assert!(has_os(&target(&online, "cvr_short").state));
    assert!(
        !has_os(&target(&online, "cvr_long").state),
        "cvr_long learned os"
    );
    assert!(
        has_os(&online.pools[0].state),
        "the pool learns os from cvr_short"
    );

    let (tsv, saved) = (dir.join("all.tsv"), dir.join("all.tdm"));
    let (tsv, saved) = (tsv.to_str().unwrap(), saved.to_str().unwrap());
    export(&db.url, "ctr,cvr_short,cvr_long", tsv, &["--kinds", "all"]);
    run_ok(&[
        "learn",
        "--input",
        tsv,
        "--header",
        "--bits",
        "16",
        "--cross",
        "app,os",
        "--pool",
        "install=cvr_long",
        "--teachers",
        "install=cvr_short,cvr_long",
        "--omit",
        "cvr_long=os",
        "--save",
        saved,
    ]);
    let offline = Checkpoint::read(Path::new(saved), true).unwrap();
    assert_eq!(offline.hashing, online.hashing);
    same_models(&offline, &online);
    let shown: serde_json::Value =
        serde_json::from_slice(&run_ok(&["checkpoint", "show", "--json", saved]).stdout).unwrap();
    assert_eq!(shown["version"], 6);
    assert_eq!(
        shown["hashing"]["omit"],
        serde_json::json!({"cvr_long": ["os"]})
    );

    // Scored, cvr_long is blind to os. Learned with one setting and no
    // L1 (every coordinate seen gets a weight), it is blind with the
    // omission and not without it: the check can fail.
    let one = ["--tune-alpha", "1", "--tune-l2", "1", "--l1", "0"];
    let scores = |name: &str, omit: &[&str]| -> Vec<serde_json::Value> {
        let file = dir.join(name);
        let file = file.to_str().unwrap();
        let learn = [
            "learn", "--input", tsv, "--header", "--bits", "16", "--save", file,
        ];
        run_ok(&[&learn[..], &one, omit].concat());
        let mut score = bin()
            .args(["score", "--checkpoint", file])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = score.stdin.take().unwrap();
        for os in ["ios", "android"] {
            writeln!(stdin, r#"{{"app":"app3","os":"{os}","n":1,"wifi":true}}"#).unwrap();
        }
        drop(stdin);
        let out = score.wait_with_output().unwrap();
        (out.stdout.split(|b| *b == b'\n'))
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    };
    let blind = scores("blind.tdm", &["--omit", "cvr_long=os"]);
    assert_eq!(blind[0]["cvr_long"], blind[1]["cvr_long"]);
    assert_ne!(blind[0]["cvr_short"], blind[1]["cvr_short"]);
    let seeing = scores("seeing.tdm", &[]);
    assert_ne!(seeing[0]["cvr_long"], seeing[1]["cvr_long"]);
    let shown = String::from_utf8(run_ok(&["checkpoint", "show", saved]).stdout).unwrap();
    assert!(shown.contains("omit        cvr_long: os"), "{shown}");

    // A malformed --omit is refused, saying why.
    let out = bin()
        .args(["learn", "--input", tsv, "--header", "--omit", "cvr_long"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("TARGET=NAME"),
        "{err}"
    );
}
