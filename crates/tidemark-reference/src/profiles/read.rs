//! What a profile process answers (SPEC 11): `profile get` (master, size,
//! counters, counts, first and last by type), `trail`, and what the tests
//! inspect besides (counts by reason, blocklist, merges, refusals, persons).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::state::{Counted, Profiles};

impl Profiles {
    /// The events counted for the person holding `id`, ordered by (ts, type, txid).
    fn events_of(&self, id: &str) -> Vec<&Counted> {
        let Some(&person) = self.person_of.get(id) else {
            return Vec::new();
        };
        let members = &self.persons[person];
        let mut out: Vec<&Counted> = self
            .events
            .iter()
            .filter(|e| members.contains(&e.counted_for))
            .collect();
        out.sort_by(|a, b| (a.ts, &a.kind, &a.txid).cmp(&(b.ts, &b.kind, &b.txid)));
        out
    }

    /// Exactly the JSON object `tidemark profile get ID --at AT --json` must print for `id` (SPEC 11),
    /// as a serde_json::Value. An unknown id: master = itself, size 1, every configured counter 0.0,
    /// counts/first/last `{}`, blocklisted false. `counters` has every configured counter by name.
    pub fn get(&self, id: &str, at_ms: i64) -> Value {
        let (master, size) = match self.person_of.get(id) {
            None => (id.to_string(), 1),
            Some(&person) => (self.master_of(person), self.persons[person].len()),
        };
        let events = self.events_of(id);
        let weight = self.setup.weight();

        let mut counters = Map::new();
        for spec in &self.setup.counters {
            let mut value = 0.0f64;
            for event in events.iter().filter(|e| e.kind == spec.event) {
                let age = (at_ms - event.ts) as f64 / spec.half_life_ms as f64;
                value += weight * (-age).exp2();
            }
            counters.insert(spec.name.clone(), json!(value));
        }
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        let mut first: BTreeMap<&str, i64> = BTreeMap::new();
        let mut last: BTreeMap<&str, i64> = BTreeMap::new();
        for event in &events {
            let kind = event.kind.as_str();
            *counts.entry(kind).or_insert(0) += 1;
            let f = first.entry(kind).or_insert(event.ts);
            *f = (*f).min(event.ts);
            let l = last.entry(kind).or_insert(event.ts);
            *l = (*l).max(event.ts);
        }
        json!({
            "id": id,
            "master": master,
            "size": size,
            "blocklisted": self.blocklisted.contains(id),
            "at": at_ms,
            "counters": counters,
            "counts": counts,
            "first": first,
            "last": last,
        })
    }

    /// The lines `tidemark trail ID --from F --to T [--types ...] --json` must print, in order (SPEC 11),
    /// ignoring retention (assume `trail` is long enough to keep everything).
    pub fn trail(&self, id: &str, from_ms: i64, to_ms: i64, types: Option<&[&str]>) -> Vec<Value> {
        self.events_of(id)
            .into_iter()
            .filter(|e| from_ms <= e.ts && e.ts < to_ms)
            .filter(|e| types.is_none_or(|types| types.contains(&e.kind.as_str())))
            .map(|e| json!({"type": e.kind, "txid": e.txid, "ts": e.ts, "ids": e.ids}))
            .collect()
    }

    /// Counts by reason so far: at least "applied" (events counted for a person), "duplicate", "stale",
    /// "bad_identifier", "no_identifier", "links_refused", "rejected" (wire-level rejects, any reason), "future".
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.counts.clone()
    }

    /// The blocklisted identifiers with their refusal counts.
    pub fn blocklist(&self) -> Vec<(String, u64)> {
        self.blocklisted
            .iter()
            .map(|id| (id.clone(), self.refusals[id]))
            .collect()
    }

    /// Every merge so far, `(ts, txid, master, absorbed)`: the event that
    /// caused it, the merged person's master, and the other side's master as
    /// it stood before.
    pub fn merges(&self) -> &[(i64, String, String, String)] {
        &self.merges
    }

    /// Refusals charged so far, per identifier charged at least once.
    pub fn refusals(&self) -> Vec<(String, u64)> {
        self.refusals.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// The identifiers of the person holding `id` (just `id` when unknown), sorted.
    pub fn person(&self, id: &str) -> Vec<String> {
        match self.person_of.get(id) {
            None => vec![id.to_string()],
            Some(&person) => self.persons[person].iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{close, count, send, setup, txid, HOUR, T0};
    use super::super::setup::MINUTE_MS;
    use super::*;

    #[test]
    fn arrival_order_does_not_change_counters() {
        let events: Vec<(&str, String, i64)> = (0..6)
            .map(|i| {
                let kind = if i % 3 == 0 { "install" } else { "click" };
                let ts = T0 + i * 7 * MINUTE_MS - (i % 2) * HOUR;
                (kind, txid(&format!("b{i}"), ts), ts)
            })
            .collect();
        let mut forward = Profiles::new(setup());
        let mut backward = Profiles::new(setup());
        for (kind, tx, ts) in &events {
            send(&mut forward, kind, tx, *ts, json!({"user": "u"}));
        }
        for (kind, tx, ts) in events.iter().rev() {
            send(&mut backward, kind, tx, *ts, json!({"user": "u"}));
        }
        let at = T0 + 2 * HOUR;
        assert_eq!(forward.get("user:u", at), backward.get("user:u", at));
        let expected: f64 = events
            .iter()
            .filter(|(kind, _, _)| *kind == "click")
            .map(|(_, _, ts)| 2f64.powf(-((at - ts) as f64) / HOUR as f64))
            .sum();
        let got = forward.get("user:u", at)["counters"]["clk_1h"]
            .as_f64()
            .unwrap();
        assert!(close(got, expected), "{got} vs {expected}");
        // `t` before `ts_e`: the term is above w.
        let early = forward.get("user:u", T0 - HOUR)["counters"]["clk_1h"]
            .as_f64()
            .unwrap();
        assert!(early > 4.0);
    }

    #[test]
    fn weight_is_one_over_the_sampled_rate() {
        let mut s = setup();
        s.prefixes = vec!["a".to_string(), "b0".to_string()];
        let w = 256.0 / 17.0;
        assert!(close(s.weight(), w));
        let mut p = Profiles::new(s);
        send(&mut p, "click", &txid("a7", T0), T0, json!({"user": "u"}));
        send(&mut p, "click", &txid("b07", T0), T0, json!({"user": "u"}));
        // Not subscribed: never received, not counted.
        send(&mut p, "click", &txid("b17", T0), T0, json!({"user": "u"}));
        send(&mut p, "click", &txid("c7", T0), T0, json!({"user": "u"}));
        p.receive(b"click-c-bad", b"{}", T0, None);
        // Subscribed but malformed: rejected.
        p.receive(b"click-aXYZ", b"{}", T0, None);
        let got = p.get("user:u", T0);
        assert!(close(got["counters"]["clk_1h"].as_f64().unwrap(), 2.0 * w));
        assert_eq!(got["counts"], json!({"click": 2}));
        assert_eq!(count(&p, "applied"), 2);
        assert_eq!(count(&p, "rejected"), 1);
        let total: u64 = p.counts().values().sum();
        assert_eq!(total, 3);
    }

    #[test]
    fn unknown_identifier_is_not_an_error() {
        let p = Profiles::new(setup());
        assert_eq!(
            p.get("member:nobody", T0),
            json!({
                "id": "member:nobody", "master": "member:nobody", "size": 1,
                "blocklisted": false, "at": T0,
                "counters": {"clk_1h": 0.0, "ins_1d": 0.0},
                "counts": {}, "first": {}, "last": {},
            })
        );
        assert!(p.trail("member:nobody", 0, i64::MAX, None).is_empty());
    }

    #[test]
    fn trail_is_ordered_and_filtered() {
        let mut p = Profiles::new(setup());
        let (a, b, c) = (txid("d1", T0), txid("d2", T0), txid("d3", T0));
        send(&mut p, "install", &b, T0 + 10, json!({"user": "u"}));
        send(
            &mut p,
            "click",
            &b,
            T0 + 10,
            json!({"ids": {"member": "m", "idfa": "i"}}),
        );
        send(
            &mut p,
            "click",
            &a,
            T0 + 10,
            json!({"user": "u", "ids": {"member": "m"}}),
        );
        send(&mut p, "click", &c, T0 + 5, json!({"user": "u"}));
        send(
            &mut p,
            "click",
            &txid("d4", T0),
            T0 + 99,
            json!({"user": "u"}),
        );
        send(
            &mut p,
            "click",
            &txid("d5", T0),
            T0 + 1,
            json!({"user": "other"}),
        );
        let line = |kind: &str, tx: &str, ts: i64, ids: &[&str]| json!({"type": kind, "txid": tx, "ts": ts, "ids": ids});
        let all = vec![
            line("click", &c, T0 + 5, &["user:u"]),
            line("click", &a, T0 + 10, &["member:m", "user:u"]),
            line("click", &b, T0 + 10, &["idfa:i", "member:m"]),
            line("install", &b, T0 + 10, &["user:u"]),
        ];
        assert_eq!(p.trail("idfa:i", T0, T0 + 99, None), all);
        assert_eq!(p.trail("user:u", T0 + 5, T0 + 99, None), all);
        assert_eq!(
            p.trail("member:m", T0 + 6, T0 + 11, None),
            all[1..].to_vec()
        );
        assert_eq!(
            p.trail("user:u", T0, T0 + 100, Some(&["install"])),
            vec![all[3].clone()]
        );
        assert_eq!(p.trail("user:u", T0, T0 + 100, Some(&["click"])).len(), 4);
    }
}
