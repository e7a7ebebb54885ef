//! Persons and links (SPEC 11): an event's link steps in order, merges
//! logged with their masters, the `max_ids` cap, refusals charged and
//! blocklisting, and a person's master.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::state::Profiles;

impl Profiles {
    /// Applies an event's links, one step at a time (see the module docs).
    pub(super) fn link(&mut self, ids: &[String], ts: i64, txid: &str) {
        // Who was charged for whom within this event: (identifier, other person).
        let mut charged: BTreeSet<(String, usize)> = BTreeSet::new();
        for i in 1..ids.len() {
            if self.blocklisted.contains(&ids[i]) {
                continue;
            }
            let Some(anchor) = (0..i).find(|&j| !self.blocklisted.contains(&ids[j])) else {
                continue;
            };
            let p = self.person_of[&ids[anchor]];
            let q = self.person_of[&ids[i]];
            if p == q {
                continue;
            }
            if self.persons[p].len() + self.persons[q].len() > self.setup.max_ids {
                self.refuse(ids, p, q, &mut charged);
            } else {
                self.merge(p, q, ts, txid);
            }
        }
    }

    /// Joins person `q` into `p`. Logged: the merged person's master, and
    /// the other side's master as it stood (whichever side the master came
    /// from).
    fn merge(&mut self, p: usize, q: usize, ts: i64, txid: &str) {
        let (mp, mq) = (self.master_of(p), self.master_of(q));
        let absorbed = std::mem::take(&mut self.persons[q]);
        for id in &absorbed {
            self.person_of.insert(id.clone(), p);
        }
        self.persons[p].extend(absorbed);
        let master = self.master_of(p);
        let other = if master == mp { mq } else { mp };
        self.merges.push((ts, txid.to_string(), master, other));
    }

    /// A link between persons `a` and `b` refused at `max_ids` (SPEC 11):
    /// counted, and charged to the event's identifiers that belong to the
    /// person at the cap, once per distinct other person. The person at the
    /// cap is the larger one; of two the same size, each is.
    fn refuse(
        &mut self,
        ids: &[String],
        a: usize,
        b: usize,
        charged: &mut BTreeSet<(String, usize)>,
    ) {
        self.count("links_refused");
        let at_cap = match self.persons[a].len().cmp(&self.persons[b].len()) {
            Ordering::Greater => vec![(a, b)],
            Ordering::Less => vec![(b, a)],
            Ordering::Equal => vec![(a, b), (b, a)],
        };
        for (person, other) in at_cap {
            let members: Vec<&String> = ids
                .iter()
                .filter(|id| self.person_of[*id] == person)
                .collect();
            for id in members {
                if charged.insert((id.clone(), other)) {
                    self.charge(id);
                }
            }
        }
    }

    /// One more refusal charged to `id`. Charged more than `blocklist_after`
    /// times, it is blocklisted at once: the event's later steps see it.
    fn charge(&mut self, id: &str) {
        let total = self.refusals.entry(id.to_string()).or_insert(0);
        *total += 1;
        if *total > self.setup.blocklist_after {
            self.blocklisted.insert(id.to_string());
        }
    }

    /// The identifier of person `p` with the smallest (first ts, identifier).
    pub(super) fn master_of(&self, p: usize) -> String {
        self.persons[p]
            .iter()
            .min_by_key(|m| (self.first_ts[*m], m.as_str()))
            .expect("a person is never empty")
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::fixtures::{close, count, send, setup, txid, HOUR, T0};
    use super::*;

    #[test]
    fn a_link_joins_two_persons_and_the_master_follows_first_ts() {
        let mut p = Profiles::new(setup());
        send(
            &mut p,
            "click",
            &txid("e1", T0),
            T0 + 100,
            json!({"user": "a"}),
        );
        send(
            &mut p,
            "click",
            &txid("e2", T0),
            T0 + 50,
            json!({"user": "b"}),
        );
        send(
            &mut p,
            "install",
            &txid("e3", T0),
            T0 + 200,
            json!({"user": "a", "ids": {"member": "m"}}),
        );
        assert_eq!(p.get("member:m", T0)["master"], json!("user:a"));
        assert_eq!(p.get("user:b", T0)["master"], json!("user:b"));
        send(
            &mut p,
            "click",
            &txid("e4", T0),
            T0 + 300,
            json!({"user": "b", "ids": {"member": "m"}}),
        );
        let got = p.get("member:m", T0 + 300);
        assert_eq!(got["size"], json!(3));
        assert_eq!(got["master"], json!("user:b"));
        assert_eq!(got["counts"], json!({"click": 3, "install": 1}));
        assert_eq!(got["first"], json!({"click": T0 + 50, "install": T0 + 200}));
        assert_eq!(got["last"], json!({"click": T0 + 300, "install": T0 + 200}));
        let merged: f64 = [100, 50, 300]
            .iter()
            .map(|ts| 2f64.powf(-((300 - ts) as f64) / HOUR as f64))
            .sum();
        assert!(close(got["counters"]["clk_1h"].as_f64().unwrap(), merged));
        // The log names the merged person's master first, whichever side it
        // came from (here b's, the side that joined), then the other side's.
        let log: Vec<(i64, &str, &str)> = p
            .merges()
            .iter()
            .map(|m| (m.0, m.2.as_str(), m.3.as_str()))
            .collect();
        assert_eq!(
            log,
            [
                (T0 + 200, "user:a", "member:m"),
                (T0 + 300, "user:b", "user:a")
            ]
        );
        // An earlier event changes the master; a tie on first ts goes bytewise.
        send(
            &mut p,
            "click",
            &txid("e5", T0),
            T0 + 10,
            json!({"ids": {"member": "m"}}),
        );
        assert_eq!(p.get("user:a", T0)["master"], json!("member:m"));
        send(
            &mut p,
            "click",
            &txid("e6", T0),
            T0 + 10,
            json!({"user": "a"}),
        );
        assert_eq!(p.get("user:b", T0)["master"], json!("member:m"));
        send(
            &mut p,
            "click",
            &txid("e7", T0),
            T0 + 10,
            json!({"ids": {"idfa": "z", "member": "m"}}),
        );
        assert_eq!(p.get("user:b", T0)["master"], json!("idfa:z"));
        assert_eq!(p.get("user:b", T0)["size"], json!(4));
    }

    #[test]
    fn without_user_an_event_counts_for_its_bytewise_smallest_identifier() {
        let mut s = setup();
        s.max_ids = 2;
        let mut p = Profiles::new(s);
        send(
            &mut p,
            "click",
            &txid("f1", T0),
            T0,
            json!({"ids": {"a": "x", "b": "y"}}),
        );
        // Kind order links a:x first, but "a1:z" < "a:x" bytewise.
        send(
            &mut p,
            "click",
            &txid("f2", T0),
            T0,
            json!({"ids": {"a": "x", "a1": "z"}}),
        );
        assert_eq!(count(&p, "links_refused"), 1);
        assert_eq!(p.get("a1:z", T0)["counts"], json!({"click": 1}));
        assert_eq!(p.get("a:x", T0)["counts"], json!({"click": 1}));
        assert_eq!(p.get("a1:z", T0)["size"], json!(1));
        // With a user, the user's person.
        send(
            &mut p,
            "click",
            &txid("f3", T0),
            T0,
            json!({"user": "zz", "ids": {"a": "x"}}),
        );
        assert_eq!(p.get("user:zz", T0)["counts"], json!({"click": 1}));
    }

    #[test]
    fn max_ids_refuses_links_and_blocklists_the_capped_identifier() {
        let mut s = setup();
        s.max_ids = 3;
        s.blocklist_after = 2;
        let mut p = Profiles::new(s);
        let mut n = 0;
        let mut event = |p: &mut Profiles, extra: Value| {
            n += 1;
            send(p, "click", &txid(&format!("9{n}"), T0), T0 + n, extra);
        };
        event(&mut p, json!({"user": "shared", "ids": {"member": "m1"}}));
        event(&mut p, json!({"user": "shared", "ids": {"member": "m2"}}));
        assert_eq!(p.get("member:m1", T0)["size"], json!(3));
        // A person of two meets the capped one: two refused steps, one charge.
        event(&mut p, json!({"ids": {"member": "m3", "idfa": "i3"}}));
        event(
            &mut p,
            json!({"user": "shared", "ids": {"member": "m3", "idfa": "i3"}}),
        );
        assert_eq!(count(&p, "links_refused"), 2);
        assert!(p.blocklist().is_empty());
        assert_eq!(p.get("user:shared", T0)["counts"], json!({"click": 3}));
        assert_eq!(p.get("member:m3", T0)["counts"], json!({"click": 1}));
        // Charged to every identifier of the event in the capped person.
        event(
            &mut p,
            json!({"user": "shared", "ids": {"member": "m1", "idfa": "i4"}}),
        );
        assert_eq!(count(&p, "links_refused"), 3);
        assert!(p.blocklist().is_empty());
        event(&mut p, json!({"user": "shared", "ids": {"idfa": "i5"}}));
        assert_eq!(p.blocklist(), vec![("user:shared".to_string(), 3)]);
        assert_eq!(p.get("user:shared", T0)["blocklisted"], json!(true));
        assert_eq!(p.get("member:m1", T0)["blocklisted"], json!(false));
        // Blocklisted: links nothing more, the others still link, still readable.
        event(
            &mut p,
            json!({"user": "shared", "ids": {"member": "m6", "idfa": "i6"}}),
        );
        assert_eq!(count(&p, "links_refused"), 4);
        assert_eq!(p.person("idfa:i6"), vec!["idfa:i6", "member:m6"]);
        assert_eq!(p.get("user:shared", T0)["counts"], json!({"click": 6}));
        assert_eq!(p.get("user:shared", T0)["size"], json!(3));
        assert_eq!(p.blocklist(), vec![("user:shared".to_string(), 3)]);
        // Linking nothing, it meets no cap: no refusal.
        event(&mut p, json!({"user": "shared", "ids": {"idfa": "i7"}}));
        assert_eq!(count(&p, "links_refused"), 4);
        assert_eq!(p.person("idfa:i7"), vec!["idfa:i7"]);
    }

    #[test]
    fn a_refusal_between_persons_of_one_size_charges_both() {
        let mut s = setup();
        s.max_ids = 3;
        s.blocklist_after = 0;
        let mut p = Profiles::new(s);
        send(
            &mut p,
            "click",
            &txid("71", T0),
            T0,
            json!({"ids": {"a": "1", "b": "1"}}),
        );
        send(
            &mut p,
            "click",
            &txid("72", T0),
            T0,
            json!({"ids": {"c": "1", "d": "1"}}),
        );
        send(
            &mut p,
            "click",
            &txid("73", T0),
            T0,
            json!({"ids": {"b": "1", "c": "1"}}),
        );
        assert_eq!(count(&p, "links_refused"), 1);
        let blocked = vec![("b:1".to_string(), 1), ("c:1".to_string(), 1)];
        assert_eq!(p.blocklist(), blocked);
        assert_eq!(p.get("a:1", T0)["counts"], json!({"click": 2}));
    }
}
