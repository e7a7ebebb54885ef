//! The as-of-bid replay of a finished demo run under other learner
//! configurations, to compare settings on the same rows (how docs/learner.md
//! chose the pool's `alpha` and measured the early target's tuning). Not run
//! by the tests; run it by hand against a demo's database (`tidemark demo`
//! prints its URL and leaves the cluster up):
//!
//! ```text
//! TIDEMARK_VARIANTS_URL='postgresql://…/tidemark_demo?host=…' \
//! TIDEMARK_VARIANTS=$'[pools.install]\ntargets = ["cvr_short", "cvr_long"]\nalpha = 0.05' \
//!   cargo test --release -p tidemark-demo --lib asof_variants -- --ignored --nocapture
//! ```
//!
//! `TIDEMARK_VARIANTS` holds learner configuration lines, variants apart by
//! `||` (an empty one is the demo's own settings without its pool and
//! without `crate::EARLY_TARGET`; `demo` is the demo's learner as built,
//! both included); each is
//! added to the demo's learner settings (`crate::LEARNER_SETTINGS`, and
//! `user_clicks` in buckets unless the variant has a `[transforms]` table).
//! `TIDEMARK_VARIANTS_SHIFT_MS`: the market's shift, for the `shift`
//! figures. `TIDEMARK_VARIANTS_DROP=a,b`: features left out of every row.
//! `TIDEMARK_VARIANTS_SLICES` set: `cvr_long`'s per-slice figures too.
//! `TIDEMARK_VARIANTS_HOUR_SHIFT_MS=ms`: the bids' `hour` as if the run had
//! started `ms` later (where the hour turns follows the wall clock a demo
//! starts at). `TIDEMARK_VARIANTS_ORACLE_AT_FIRST_ROW` set: the oracle reads
//! each label with the first row the shard wrote of its member (an early
//! target's when its window opened), not at its bid
//! (`crate::asof::Setup::oracle_at_first_row`). With a shift, each arm's mean
//! KL after it and `early`'s share of the naive→oracle gap are printed.

#[test]
#[ignore]
fn asof_variants() {
    let url = std::env::var("TIDEMARK_VARIANTS_URL").expect("TIDEMARK_VARIANTS_URL");
    let variants = std::env::var("TIDEMARK_VARIANTS").unwrap_or_default();
    let shift = (std::env::var("TIDEMARK_VARIANTS_SHIFT_MS").ok())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a number of ms"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rows = rt.block_on(async {
        let c = tidemark_store::connect(&url).await.unwrap();
        crate::store::emitted(&c).await.unwrap()
    });
    // Features left out of every row, as if the bidder had not logged them.
    if let Ok(drop) = std::env::var("TIDEMARK_VARIANTS_DROP") {
        rewrite(&mut rows, |f, _| {
            for name in drop.split(',') {
                f.remove(name);
            }
        });
    }
    // The bids' `hour` as if the run had started `ms` later: where the
    // hour turns falls with the wall clock a demo starts at.
    if let Ok(ms) = std::env::var("TIDEMARK_VARIANTS_HOUR_SHIFT_MS") {
        let ms: i64 = ms.parse().expect("a number of ms");
        rewrite(&mut rows, |f, created| {
            if f.contains_key("hour") {
                let hour = ((created + ms) / 3_600_000).rem_euclid(24);
                f.insert("hour".into(), hour.to_string().into());
            }
        });
    }
    let base = format!("checkpoint_dir = \"c\"\n{}", crate::LEARNER_SETTINGS);
    // The demo's transform, unless a variant gives its own.
    let transforms = format!("[transforms]\nuser_clicks = \"{}\"\n", crate::USER_CLICKS);
    let built = format!("{}{}", crate::POOL, crate::EARLY_TARGET);
    for v in variants.split("||") {
        let v = if v.trim() == "demo" { &built } else { v };
        let own = if v.contains("[transforms]") {
            ""
        } else {
            &transforms
        };
        let text = format!("{base}{v}\n{own}[[sources]]\nname = \"demo\"\n");
        let config = tidemark_learner::Config::from_toml(&text).unwrap();
        let setup = crate::asof::Setup {
            config: &config,
            slice_ms: crate::SLICE_MS,
            final_offset_ms: crate::FINAL_OFFSET_MS,
            shift_at_ms: shift,
            oracle_at_first_row: std::env::var_os("TIDEMARK_VARIANTS_ORACLE_AT_FIRST_ROW")
                .is_some(),
        };
        let (targets, shift) = crate::asof::evaluate(&rows, &setup).unwrap();
        println!("== {}", v.replace('\n', " "));
        for name in ["ctr", "cvr_short", "cvr_long", "p_install"] {
            let a = &targets[name];
            let kl: Vec<String> = (crate::asof::ARMS.iter())
                .map(|arm| format!("{arm} {:.5}", a[arm]["kl"].as_f64().unwrap_or(f64::NAN)))
                .collect();
            println!(
                "  {name:<10} {} | early gap {:.3} calibration {:.3}",
                kl.join(" "),
                a["early"]["gap_closed"].as_f64().unwrap_or(f64::NAN),
                a["early"]["calibration"].as_f64().unwrap_or(f64::NAN)
            );
        }
        if !shift.is_null() {
            println!("  shift {shift}");
            // Mean KL after the shift, and early's share of naive→oracle.
            for name in ["cvr_long", "p_install"] {
                let after = |arm: &str| shift[name][arm]["kl_after"].as_f64().unwrap_or(f64::NAN);
                let kl: Vec<String> = ["final_only", "naive", "early", "oracle"]
                    .map(|arm| format!("{arm} {:.5}", after(arm)))
                    .into();
                let share = (after("naive") - after("early")) / (after("naive") - after("oracle"));
                println!(
                    "  after {name:<10} {} | early naive→oracle {share:.3}",
                    kl.join(" ")
                );
            }
        }
        if std::env::var_os("TIDEMARK_VARIANTS_SLICES").is_some() {
            // Per slice, each arm's KL / calibration of cvr_long.
            let s = &targets["cvr_long"]["slices"];
            let arms = ["final_only", "early", "oracle", "constant"];
            for i in 0..s["kl"]["early"].as_array().map_or(0, Vec::len) {
                let cells: Vec<String> = (arms.iter())
                    .map(|a| {
                        format!(
                            "{a} {:.4}/{:.2}",
                            s["kl"][a][i].as_f64().unwrap_or(f64::NAN),
                            s["calibration"][a][i].as_f64().unwrap_or(f64::NAN)
                        )
                    })
                    .collect();
                println!("  slice {i:>3} {}", cells.join("  "));
            }
        }
    }
}

/// Edits every row's features (given its creation time, ms).
fn rewrite(
    rows: &mut [crate::store::Emitted],
    edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>, i64),
) {
    for r in rows {
        let mut f = serde_json::from_str(&r.features).unwrap();
        edit(&mut f, r.created_ms);
        r.features = serde_json::Value::Object(f).to_string();
    }
}
