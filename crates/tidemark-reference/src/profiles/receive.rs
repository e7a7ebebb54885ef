//! Receiving one message (SPEC 11): the checks in their order (wire,
//! future, too many identifiers, stale, duplicate, identifiers), then the
//! event's identifiers, links and the person it counts for.

use std::collections::BTreeSet;

use serde_json::Value;

use super::state::{Counted, Profiles};
use super::wire::{decode, identifiers, Decoded, Wire};

impl Profiles {
    /// One message as the profile process received it, in receive order.
    /// `reference_ms`: the process's max_future reference at receipt (SPEC 1).
    /// `clock_ms`: the process clock at receipt (SPEC 6), None before it has one; a copy whose
    /// txid creation time is < clock_ms - its type's dedup horizon is stale (counted "stale", ignored).
    pub fn receive(
        &mut self,
        topic: &[u8],
        payload: &[u8],
        reference_ms: i64,
        clock_ms: Option<i64>,
    ) {
        let Decoded {
            kind,
            txid,
            created,
            ts,
            body,
        } = match decode(&self.setup, topic, payload) {
            Wire::NotReceived => return,
            Wire::Rejected => return self.count("rejected"),
            Wire::Event(event) => event,
        };
        let horizon = reference_ms.saturating_add(self.setup.max_future_ms);
        if created > horizon || ts > horizon {
            return self.count("future");
        }
        // Counted as sent, bad ones included (as `identifiers` counts them):
        // a `user` that is there, each key of an `ids` object, an `ids` of
        // another kind as one.
        let sent = usize::from(body.contains_key("user"))
            + match body.get("ids") {
                None => 0,
                Some(Value::Object(ids)) => ids.len(),
                Some(_) => 1,
            };
        if sent > self.setup.max_ids_per_event {
            return self.count("too_many_ids");
        }
        if let Some(clock) = clock_ms {
            if created < clock.saturating_sub(self.setup.dedup_of(&kind)) {
                return self.count("stale");
            }
        }
        if !self.taken.insert((kind.clone(), txid.clone())) {
            return self.count("duplicate");
        }
        let (ids, bad) = identifiers(&body);
        for _ in 0..bad {
            self.count("bad_identifier");
        }
        if ids.is_empty() {
            return self.count("no_identifier");
        }

        for id in &ids {
            if !self.person_of.contains_key(id) {
                self.person_of.insert(id.clone(), self.persons.len());
                self.persons.push(BTreeSet::from([id.clone()]));
            }
            let first = self.first_ts.entry(id.clone()).or_insert(ts);
            *first = (*first).min(ts);
        }
        self.link(&ids, ts, &txid);

        let counted_for = if ids[0].starts_with("user:") {
            // Only `user` gives a `user:` identifier (a `user` kind in `ids` is refused).
            ids[0].clone()
        } else {
            ids.iter().min().expect("not empty").clone()
        };
        let mut sorted = ids.clone();
        sorted.sort();
        self.events.push(Counted {
            kind,
            txid,
            ts,
            ids: sorted,
            counted_for,
        });
        self.count("applied");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{count, send, setup, txid, T0};
    use super::super::setup::{DAY_MS, MINUTE_MS};
    use super::super::wire::MAX_PAYLOAD;
    use super::*;

    #[test]
    fn duplicates_count_once() {
        let mut p = Profiles::new(setup());
        let tx = txid("a1", T0);
        send(&mut p, "click", &tx, T0, json!({"user": "u1"}));
        send(&mut p, "click", &tx, T0 - 5, json!({"user": "u2"}));
        send(&mut p, "click", &tx, T0, json!({"user": "u1"}));
        assert_eq!(count(&p, "applied"), 1);
        assert_eq!(count(&p, "duplicate"), 2);
        let got = p.get("user:u1", T0);
        assert_eq!(got["counters"]["clk_1h"], json!(1.0));
        assert_eq!(got["counts"], json!({"click": 1}));
        // The later copy linked nothing and created nobody.
        assert_eq!(p.get("user:u2", T0)["counts"], json!({}));
        assert_eq!(p.person("user:u1"), vec!["user:u1".to_string()]);
        // Another type with the same txid is another event.
        send(&mut p, "install", &tx, T0 + 1, json!({"user": "u1"}));
        assert_eq!(count(&p, "applied"), 2);
    }

    #[test]
    fn wire_future_and_stale_checks_come_before_dedup() {
        let mut p = Profiles::new(setup());
        let far = txid("0f", T0 + 11 * MINUTE_MS);
        let body = |tx: &str, ts: i64| json!({"type": "click", "txid": tx, "ts": ts, "user": "u"});
        let topic = |tx: &str| format!("click-{tx}");
        p.receive(
            topic(&far).as_bytes(),
            body(&far, T0).to_string().as_bytes(),
            T0,
            None,
        );
        assert_eq!(count(&p, "future"), 1);
        // The same txid later, when the reference has caught up, is the event.
        p.receive(
            topic(&far).as_bytes(),
            body(&far, T0).to_string().as_bytes(),
            T0 + MINUTE_MS,
            None,
        );
        assert_eq!(count(&p, "applied"), 1);
        let soon = txid("0e", T0);
        p.receive(
            topic(&soon).as_bytes(),
            body(&soon, T0 + 11 * MINUTE_MS).to_string().as_bytes(),
            T0,
            None,
        );
        assert_eq!(count(&p, "future"), 2);
        let old = txid("0d", T0 - 9 * DAY_MS);
        p.receive(
            topic(&old).as_bytes(),
            body(&old, T0).to_string().as_bytes(),
            T0,
            Some(T0),
        );
        assert_eq!(count(&p, "stale"), 1);
        p.receive(
            topic(&old).as_bytes(),
            body(&old, T0).to_string().as_bytes(),
            T0,
            None,
        );
        assert_eq!(count(&p, "applied"), 2);
        p.receive(
            topic(&old).as_bytes(),
            body(&old, T0).to_string().as_bytes(),
            T0,
            Some(T0),
        );
        assert_eq!(count(&p, "stale"), 2);
        assert_eq!(count(&p, "duplicate"), 0);

        let ok = txid("0c", T0);
        let rejects: Vec<(String, String)> = vec![
            (
                topic(&ok),
                json!({"type": "install", "txid": ok, "ts": T0, "user": "u"}).to_string(),
            ),
            (
                topic(&ok),
                json!({"type": "click", "txid": far, "ts": T0, "user": "u"}).to_string(),
            ),
            (
                topic(&ok),
                json!({"type": "click", "txid": ok, "ts": 1.0, "user": "u"}).to_string(),
            ),
            (
                topic(&ok),
                json!({"type": "click", "txid": ok, "ts": -1, "user": "u"}).to_string(),
            ),
            (
                topic(&ok),
                json!({"type": "click", "txid": ok, "ts": 1i64 << 53, "user": "u"}).to_string(),
            ),
            (
                topic(&ok),
                json!({"type": "click", "txid": ok, "user": "u"}).to_string(),
            ),
            (topic(&ok), "[1]".to_string()),
            (topic(&ok), "{".to_string()),
            (
                topic(&ok.to_uppercase()),
                body(&ok.to_uppercase(), T0).to_string(),
            ),
            (
                topic(&ok),
                format!(
                    "{{\"pad\": \"{}\", \"type\": \"click\", \"txid\": \"{ok}\", \"ts\": {T0}}}",
                    "p".repeat(MAX_PAYLOAD)
                ),
            ),
        ];
        for (topic, payload) in &rejects {
            p.receive(topic.as_bytes(), payload.as_bytes(), T0, None);
        }
        assert_eq!(count(&p, "rejected"), rejects.len() as u64);
        // None of them took the txid.
        p.receive(
            topic(&ok).as_bytes(),
            body(&ok, T0).to_string().as_bytes(),
            T0,
            None,
        );
        assert_eq!(count(&p, "applied"), 3);
        // Ticks and types not read are not received.
        p.receive(
            b"tick",
            json!({"publisher": "p", "ts": T0}).to_string().as_bytes(),
            T0,
            None,
        );
        let bid = txid("0b", T0);
        p.receive(
            format!("bid-{bid}").as_bytes(),
            json!({"type": "bid", "txid": bid, "ts": T0})
                .to_string()
                .as_bytes(),
            T0,
            None,
        );
        assert_eq!(count(&p, "rejected"), rejects.len() as u64);
        assert_eq!(count(&p, "applied"), 3);
    }
}
