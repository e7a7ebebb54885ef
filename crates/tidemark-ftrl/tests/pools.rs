//! Targets that share weights (SPEC 10, v1.3): a thin target pooled with a
//! frequent one borrows its evidence, the pool travels in the checkpoint,
//! and a bidder's reader scores each pooled target as the learner does.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use tidemark_checkpoint::{Checkpoint, Model};
use tidemark_features::{sigmoid, Hashing};
use tidemark_ftrl::{Models, Params, Row};

/// A deterministic stream of uniforms.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

const APPS: usize = 40;

/// Each app's effect on the log-odds, shared by both targets.
fn effects() -> Vec<f64> {
    let mut r = Rng(7);
    (0..APPS).map(|_| (r.next() - 0.5) * 5.0).collect()
}

fn bid(app: usize) -> Map<String, Value> {
    json!({"app": format!("app{app}")})
        .as_object()
        .unwrap()
        .clone()
}

/// How `train` pools the two targets.
#[derive(Clone, Copy, PartialEq)]
enum Pooling {
    Alone,
    /// Both score and teach the pool.
    Shared,
    /// `short` teaches the pool, `long` scores with it.
    Lent,
}

/// 30,000 rows of `short` (base −2) and one in 60 of `long` (base −3.5),
/// both moved by the same app effect; returns the models and the truth.
fn train(pooling: Pooling) -> (Models, Vec<f64>) {
    let a = effects();
    let pool = |t: &str| (t.to_owned(), "install".to_owned());
    let mut m = Models::new(Hashing::new(12, 0, vec![]), 1000);
    match pooling {
        Pooling::Alone => {}
        Pooling::Shared => {
            m = m.with_pools(&BTreeMap::from([pool("short"), pool("long")]), |_| {
                Params::default()
            });
        }
        Pooling::Lent => {
            m = (m.with_pools(&BTreeMap::from([pool("long")]), |_| Params::default()))
                .with_teachers(&BTreeMap::from([pool("short")]));
        }
    }
    let mut r = Rng(11);
    for i in 0..30_000 {
        let app = (r.next() * APPS as f64) as usize;
        let (target, base) = if i % 60 == 0 {
            ("long", -3.5)
        } else {
            ("short", -2.0)
        };
        let y = r.next() < sigmoid(base + a[app]);
        m.learn(target, Params::default, &bid(app), Row::plain(y));
    }
    (m, a)
}

/// Mean KL of `long`'s predictions from the truth over the apps.
fn long_kl(m: &Models, a: &[f64]) -> f64 {
    let kl = |p: f64, q: f64| p * (p / q).ln() + (1.0 - p) * ((1.0 - p) / (1.0 - q)).ln();
    (0..APPS)
        .map(|app| {
            kl(
                sigmoid(-3.5 + a[app]),
                m.predict("long", &bid(app)).unwrap(),
            )
        })
        .sum::<f64>()
        / APPS as f64
}

#[test]
fn a_thin_target_pooled_with_a_frequent_one_borrows_its_evidence() {
    let (alone, a) = train(Pooling::Alone);
    let (pooled, _) = train(Pooling::Shared);
    let (kl_alone, kl_pooled) = (long_kl(&alone, &a), long_kl(&pooled, &a));
    // 500 rows of `long` alone learn little of the app effects; 30,000
    // rows through the pool learn them.
    assert!(
        kl_pooled < 0.5 * kl_alone,
        "pooled {kl_pooled} alone {kl_alone}"
    );
    assert_eq!(pooled.pools["install"].trained, 30_000);
    assert_eq!(pooled.pool_of("long"), Some("install"));
    assert!(alone.pools.is_empty());
}

#[test]
fn a_pool_resumes_from_its_checkpoint_and_every_reader_scores_as_trained() {
    let (m, _) = train(Pooling::Shared);
    let c = m.to_checkpoint(BTreeMap::new(), 1);
    assert_eq!(c.pools.len(), 1);
    let reader = Model::from_checkpoint(&c);
    for app in 0..APPS {
        let scores = reader.score(&bid(app));
        for t in ["short", "long"] {
            let learner = m.predict(t, &bid(app)).unwrap();
            assert!(
                (scores.get(t).unwrap() - learner).abs() < 1e-6,
                "{t} app{app}"
            );
        }
    }
    assert!(c.pools[0].margin == 0.0 && c.pools[0].labels.is_none());
    let c = Checkpoint::from_bytes(&c.to_bytes(), true).unwrap();
    assert!(c
        .targets
        .iter()
        .all(|t| t.pool.as_deref() == Some("install")));
    let reader = Model::from_checkpoint(&c);
    let mut resumed = Models::from_checkpoint(&c, 1000);
    let mut again = m.clone();
    for app in 0..APPS {
        let x = bid(app);
        let scores = reader.score(&x);
        for t in ["short", "long"] {
            let learner = again.predict(t, &x).unwrap();
            if app == 0 {
                assert!((scores.get(t).unwrap() - learner).abs() < 1e-6, "{t}");
            }
            assert_eq!(resumed.predict(t, &x), Some(learner));
        }
        // Resumed, it learns on exactly as it would have.
        let row = Row::plain(app % 3 == 0);
        assert_eq!(
            resumed.learn("long", Params::default, &x, row),
            again.learn("long", Params::default, &x, row)
        );
    }
    // Without the pool, `long` would score something else.
    let mut unpooled = c.clone();
    unpooled.pools.clear();
    unpooled.targets.iter_mut().for_each(|t| t.pool = None);
    let lone = Model::from_checkpoint(&unpooled).score(&bid(3));
    assert_ne!(lone.get("long"), reader.score(&bid(3)).get("long"));
}

#[test]
fn a_target_keeps_the_pool_it_was_trained_with() {
    let (m, _) = train(Pooling::Alone);
    let c = m.to_checkpoint(BTreeMap::new(), 1);
    // A configuration pooling a target already learned alone leaves it alone.
    let pools = BTreeMap::from([("long".to_owned(), "install".to_owned())]);
    let resumed = Models::from_checkpoint(&c, 1000).with_pools(&pools, |_| Params::default());
    assert_eq!(resumed.pool_of("long"), None);
    let fresh =
        Models::new(Hashing::new(12, 0, vec![]), 1000).with_pools(&pools, |_| Params::default());
    assert_eq!(fresh.pool_of("long"), Some("install"));
}

#[test]
fn a_pool_lent_by_a_frequent_target_leaves_it_as_it_was_alone() {
    let (alone, a) = train(Pooling::Alone);
    let (lent, _) = train(Pooling::Lent);
    for app in 0..APPS {
        // The teacher scores without the pool: exactly as alone.
        assert_eq!(
            lent.predict("short", &bid(app)),
            alone.predict("short", &bid(app))
        );
    }
    let (kl_alone, kl_lent) = (long_kl(&alone, &a), long_kl(&lent, &a));
    assert!(kl_lent < 0.5 * kl_alone, "lent {kl_lent} alone {kl_alone}");
    assert_eq!(lent.pools["install"].trained, 30_000 - 500);
    let c = lent.to_checkpoint(BTreeMap::new(), 1);
    assert_eq!(c.targets.iter().filter(|t| t.pool.is_some()).count(), 1);
}
