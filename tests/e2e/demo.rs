//! `tidemark demo`, small, on the shared test cluster: its report
//! (`report.json` and the page) states what its database holds, `tidemark
//! export` finds the demo's observations right after, and a signal stops the
//! run early with every process it started and still writes the report.

use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use tidemark_testkit::*;

/// One demo at a time: they share a port and a database.
static DEMO: Mutex<()> = Mutex::new(());

fn demo_url() -> String {
    tidemark_store::Cluster::new(&test_home())
        .unwrap()
        .url_for("tidemark_demo")
}

/// The single value `sql` selects, as a number.
fn f(url: &str, sql: &str) -> f64 {
    query_rows(url, &format!("SELECT x::text FROM ({sql}) q(x)"))[0][0]
        .as_deref()
        .expect("a value")
        .parse()
        .unwrap()
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
        "{what}: report {a}, database {b}"
    );
}

/// Every `data-key="path">text<` cell of the page against the JSON at path,
/// to the digits the page shows.
fn page_agrees(html: &str, report: &Value) -> usize {
    let mut n = 0;
    for part in html.split("data-key=\"").skip(1) {
        let (key, rest) = part.split_once('"').unwrap();
        let text = &rest[1..rest.find('<').unwrap()];
        let json = report.pointer(&format!("/{key}")).unwrap_or(&Value::Null);
        match json.as_f64() {
            None => assert_eq!(text, "–", "{key}: page {text}, JSON {json}"),
            Some(x) => {
                let shown: f64 = text.parse().unwrap_or_else(|_| panic!("{key}: {text}"));
                let digits = text.split_once('.').map_or(0, |(_, d)| d.len());
                let tolerance = 0.5 * 10f64.powi(-(digits as i32)) + 1e-12;
                assert!(
                    (shown - x).abs() <= tolerance,
                    "{key}: page {text}, JSON {x}"
                );
            }
        }
        n += 1;
    }
    let embedded = html
        .split(r#"<script type="application/json" id="report">"#)
        .nth(1)
        .and_then(|s| s.split("</script>").next())
        .expect("the JSON embedded in the page");
    let embedded: Value = serde_json::from_str(&embedded.replace("<\\/", "</")).unwrap();
    assert_eq!(&embedded, report, "the page embeds report.json");
    n
}

#[test]
fn a_small_demo_reports_what_its_database_holds() {
    let _one = DEMO.lock().unwrap_or_else(|e| e.into_inner());
    let _cluster = TestDb::new("demo_anchor"); // the shared cluster runs
    let home = test_home();
    let out = bin()
        .env("TIDEMARK_HOME", &home)
        .args([
            "demo",
            "--seconds",
            "12",
            // 96 minutes of event time: impressions whose long install
            // window (30 m) has passed after both install models began, so
            // p_install has rows to score.
            "--tps",
            "12",
            "--speed",
            "480",
            "--persons",
            "300",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("report        "), "{stdout}");
    // Not a terminal: plain progress lines, no escape codes.
    assert!(!stderr.contains('\u{1b}'), "{stderr}");

    let dir = home.join("report");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    let url = demo_url();

    let published: u64 = report["published"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(report["events"].as_u64(), Some(published));
    assert!(published > 50_000, "{published}");
    assert_eq!(report["interrupted"], false);

    let targets = report["targets"].as_object().unwrap();
    for t in ["ctr", "cvr_short", "cvr_long", "p_install"] {
        assert!(targets.contains_key(t), "{t} missing: {report}");
    }
    for (t, v) in targets {
        let g = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{t}.{k}: {v}"));
        assert!(g("online_baseline_logloss") > 0.0, "{t}");
        if t == "p_install" {
            // Impressions (the ctr rows) swept past the long install window
            // and emitted after the first row of each install target (the
            // replay's order), labelled by an install within the window (a
            // cvr row labelled 1), scored against the market's P(click, then
            // install): all from the database.
            let sql = "SELECT count(*)::text, avg(y)::text,
                              avg(-ln(CASE WHEN y = 1 THEN p ELSE 1 - p END))::text
                         FROM (SELECT greatest(least(t.p_install, 1 - 1e-15), 1e-15) AS p,
                                      (EXISTS (SELECT 1 FROM tidemark.observations c
                                                WHERE c.txid = o.txid AND c.label = 1
                                                  AND c.target IN ('cvr_short', 'cvr_long')))::int AS y
                                 FROM tidemark.observations o JOIN tidemark_demo.truth t USING (txid)
                                WHERE o.target = 'ctr'
                                  AND (extract(epoch FROM o.created_at) * 1000)::bigint
                                      <= (SELECT w.wm_ms FROM tidemark.watermarks w
                                           WHERE w.shard = o.shard AND w.phase = 'cvr_long')
                                  AND (o.emitted_at, o.shard, o.seq) > ALL (
                                      SELECT DISTINCT ON (target) emitted_at, shard, seq
                                        FROM tidemark.observations
                                       WHERE target IN ('cvr_short', 'cvr_long')
                                       ORDER BY target, emitted_at, shard, seq)) x";
            let row = &query_rows(&url, sql)[0];
            let num = |i: usize| row[i].as_deref().unwrap().parse::<f64>().unwrap();
            close(g("rows"), num(0), "p_install rows");
            close(g("label_rate"), num(1), "p_install label rate");
            close(g("truth_logloss"), num(2), "p_install truth logloss");
            assert!(
                g("truth_logloss") < g("baseline_logloss"),
                "p_install has signal"
            );
            continue;
        }
        // Matured rows: cvr_long is learned early, and its provisional
        // zeros are not labels to score (docs/demo.md).
        let matured = "kind <> 'provisional'";
        let rows = f(
            &url,
            &format!(
                "SELECT count(*) FROM tidemark.observations WHERE target = '{t}' AND {matured}"
            ),
        );
        close(g("rows"), rows, &format!("{t} rows"));
        let rate = f(
            &url,
            &format!(
                "SELECT avg(label) FROM tidemark.observations WHERE target = '{t}' AND {matured}"
            ),
        );
        close(g("label_rate"), rate, &format!("{t} label rate"));
        // The floor and the baseline, computed by the database from the
        // market's truth file and the labels.
        let col = t.as_str();
        let floor = format!(
            "SELECT avg(-ln(CASE WHEN o.label = 1 THEN p ELSE 1 - p END))::text, count(*)::text
               FROM (SELECT o.label, greatest(least(t.{col}, 1 - 1e-15), 1e-15) AS p
                       FROM tidemark.observations o JOIN tidemark_demo.truth t USING (txid)
                      WHERE o.target = '{t}' AND o.kind <> 'provisional' AND t.{col} IS NOT NULL) o"
        );
        let row = &query_rows(&url, &floor)[0];
        let truth_rows: f64 = row[1].as_deref().unwrap().parse().unwrap();
        close(g("truth_rows"), truth_rows, &format!("{t} truth rows"));
        // Every observation's transaction is one the market generated.
        close(truth_rows, rows, &format!("{t}: rows with a truth"));
        let truth: f64 = row[0].as_deref().unwrap().parse().unwrap();
        close(g("truth_logloss"), truth, &format!("{t} truth logloss"));
        let baseline = -(rate * rate.ln() + (1.0 - rate) * (1.0 - rate).ln());
        assert!(
            (g("baseline_logloss") - baseline).abs() < 1e-9,
            "{t} baseline"
        );
        let gap = (baseline - g("logloss")) / (baseline - truth);
        close(g("gap_closed"), gap, &format!("{t} gap"));
        close(
            g("profile_lift"),
            g("without_profiles_logloss") - g("logloss"),
            &format!("{t} lift"),
        );
        let cal: usize = v["calibration"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["rows"].as_u64().unwrap() as usize)
            .sum();
        assert_eq!(
            cal,
            rows as usize - rows as usize / 2,
            "{t}: the later half"
        );
        // The replay and the online learner learn the same rows, in another
        // interleaving of the shards.
        assert!(
            (g("logloss") - g("online_logloss")).abs() < 0.02,
            "{t}: replay {} against online {}",
            g("logloss"),
            g("online_logloss")
        );
    }
    // The market has signal and the learner finds it.
    let ctr = &report["targets"]["ctr"];
    assert!(ctr["truth_logloss"].as_f64() < ctr["baseline_logloss"].as_f64());
    assert!(ctr["logloss"].as_f64() < ctr["baseline_logloss"].as_f64());
    as_of_bid_is_reported(&report, &url);

    let ids = f(&url, "SELECT count(*) FROM tidemark.profile_ids");
    close(
        report["bridging"]["identifiers"].as_f64().unwrap(),
        ids,
        "identifiers",
    );
    for k in ["purity", "completeness"] {
        let x = report["bridging"][k].as_f64().unwrap();
        assert!(x > 0.0 && x <= 1.0, "{k} {x}");
    }
    let n = report["series"]["t"].as_array().unwrap().len();
    assert!(n >= 10, "a sample a second: {n}");
    for (k, v) in report["series"]["observations"].as_object().unwrap() {
        assert_eq!(v.as_array().unwrap().len(), n, "{k}");
    }
    let clicks = f(
        &url,
        "SELECT count(*) FROM tidemark_demo.truth WHERE click_delay_ms IS NOT NULL",
    );
    close(
        report["delays"]["click"]["total"].as_f64().unwrap(),
        clicks,
        "clicks drawn",
    );

    let cells = page_agrees(&html, &report);
    assert!(cells >= 10 * targets.len(), "{cells} cells");
    assert!(html.matches("<svg").count() >= 8);
    assert!(
        !html.contains("http://") || !html.contains("src=\"http"),
        "no network"
    );

    // `tidemark export` right after the demo reads the demo's database.
    let out = bin()
        .env("TIDEMARK_HOME", &home)
        .args(["export", "--target", "ctr"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(
        lines as f64,
        ctr["rows"].as_f64().unwrap() + 1.0,
        "header + rows"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("demo"));
}

#[test]
fn a_signal_stops_the_demo_early_and_it_still_reports() {
    let _one = DEMO.lock().unwrap_or_else(|e| e.into_inner());
    let _cluster = TestDb::new("demo_anchor2");
    let home = test_home();
    let _ = std::fs::remove_file(home.join("report").join("report.json"));
    // The last demo's database would answer the wait below at once.
    let admin = tidemark_store::Cluster::new(&home)
        .unwrap()
        .url_for("postgres");
    block_on(async move {
        let c = tidemark_store::connect(&admin).await.unwrap();
        c.batch_execute("DROP DATABASE IF EXISTS tidemark_demo WITH (FORCE)")
            .await
            .unwrap();
    });
    let mut child = bin()
        .env("TIDEMARK_HOME", &home)
        .args([
            "demo",
            "--seconds",
            "60",
            "--tps",
            "100",
            "--persons",
            "300",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = demo_url();
    // Stop it once observations flow.
    let deadline = Instant::now() + Duration::from_secs(120);
    while query_i64(&url, "SELECT count(*) FROM tidemark.observations").is_none_or(|n| n == 0) {
        assert!(Instant::now() < deadline, "no observations after 120 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    let started = Instant::now();
    assert!(tidemark_testkit::signal(child.id(), "INT"));
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "it stopped early, not after the 60 s it was given"
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join("report").join("report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["interrupted"], true);
    let rows = f(
        &url,
        "SELECT count(*) FROM tidemark.observations WHERE target = 'ctr'",
    );
    close(
        report["targets"]["ctr"]["rows"].as_f64().unwrap(),
        rows,
        "ctr rows",
    );
    // No shard, profile process or learner left running.
    let config = home.join("demo");
    let left = std::process::Command::new("pgrep")
        .args(["-f", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// The as-of-bid replay (docs/demo.md): every arm of every target scored on
/// the same events, the early target's rows of every kind in the database,
/// and an oracle that knows every label at its bid beating the label rate.
fn as_of_bid_is_reported(report: &serde_json::Value, url: &str) {
    for t in ["ctr", "cvr_short", "cvr_long", "p_install"] {
        let a = &report["targets"][t]["as_of_bid"];
        let events = a["oracle"]["events"].as_u64().unwrap_or(0);
        assert!(events > 0, "{t}: no event scored as of bid: {a}");
        for arm in [
            "final_only",
            "pooled_final",
            "naive",
            "early",
            "oracle",
            "constant",
        ] {
            assert_eq!(a[arm]["events"].as_u64(), Some(events), "{t} {arm}");
            let kl = a[arm]["kl"].as_f64().unwrap_or(-1.0);
            assert!(kl >= 0.0, "{t} {arm}: {kl}");
            let c = a[arm]["calibration"].as_f64().unwrap_or(-1.0);
            assert!(c > 0.0, "{t} {arm}: {c}");
        }
        let slices = a["slices"]["start_ms"].as_array().unwrap().len();
        assert_eq!(a["slices"]["kl"]["early"].as_array().unwrap().len(), slices);
    }
    let ctr = &report["targets"]["ctr"]["as_of_bid"];
    assert!(ctr["oracle"]["kl"].as_f64() < ctr["constant"]["kl"].as_f64());
    // The demo's shards learn cvr_long early: every kind is there.
    let f = |sql: &str| tidemark_testkit::query_i64(url, sql).unwrap();
    for kind in ["provisional", "late", "final"] {
        let n = f(&format!(
            "SELECT count(*) FROM tidemark.observations WHERE target = 'cvr_long' AND kind = '{kind}'"
        ));
        assert!(n > 0, "no {kind} cvr_long row");
    }
    assert!(report["shift"].is_null());
}
