//! The expected state of a profile process (SPEC 11), computed from the
//! messages it received, written from the contract alone (`docs/contract.md`), sharing no code with
//! tidemark-person, tidemark-profiles or tidemark-reader.
//!
//! It is the oracle of the profile differential tests, so it is written the
//! slow and obvious way: every message is validated with `serde_json::Value`,
//! every event counted is kept whole in one list, persons are plain
//! `BTreeSet`s of identifiers, masters and counters are computed from scratch
//! at query time (counters naively, one `f64` term per event).
//!
//! # Readings of SPEC 11 (where it leaves room, this module decides)
//!
//! * **Order of checks** for a received message: wire (SPEC 1-3), future
//!   (txid creation time or `ts` more than `max_future` ahead of the
//!   reference), stale (txid creation time `< clock - dedup` of its type), duplicate
//!   (the (type, txid) was already taken), identifiers. Rejected, future and
//!   stale copies do not take their (type, txid); a first copy left without
//!   identifiers does (it was "the event"; later copies are duplicates).
//! * **Receiving**: a message is received when its topic starts with
//!   `<type>-<prefix>` for a type in `types` (not `tick`) and one of the
//!   process's prefixes (any, when there are none), as ZeroMQ prefix matching
//!   does; others are silently not received (not counted). A received type
//!   that is neither built-in nor a configured custom type is rejected. Only
//!   `type`, `txid`, `ts`, `user` and `ids` are used; a bid's `features` and
//!   `price` are not checked.
//! * **Too many**: an event (within `max_future`) carrying more than
//!   `max_ids_per_event` identifiers as sent (a present `user`, each key of
//!   an `ids` object, an `ids` of another kind as one) is counted
//!   `too_many_ids` and ignored whole, before `stale` and `duplicate`.
//! * **Identifiers**: a present `user` that is not a string (including `null`)
//!   is one bad identifier; a present `ids` that is not an object (including
//!   `null`) is one bad identifier; each bad entry of `ids` is one.
//! * **Link order**: the event's link list is `L = [user, ids sorted by
//!   kind]` (sorted by *kind*, which is not the same as sorting the full
//!   identifiers: `a1:x < a:x` bytewise, yet kind `a < a1`). Links form a
//!   star: step `i = 1..len(L)` links `L[i]` to the *anchor*, the first
//!   identifier of `L` that is not blocklisted at that moment; the step is
//!   skipped when `L[i]` is blocklisted or the anchor is not before `L[i]` in
//!   `L`. With no blocklisting that is `L[0]-L[1]`, `L[0]-L[2]`, ...; a
//!   blocklisted identifier links nothing but the others still link together.
//! * **Refusal**: a link between two distinct persons of sizes `a` and `b` is
//!   refused when `a + b > max_ids`; each refused step counts one
//!   `links_refused`. "The person at the cap" is the larger of the two (both
//!   when they are the same size). The refusal is charged (one refusal each)
//!   to every identifier of the event (blocklisted or not) that is in that
//!   person at that moment, at most once per (identifier, other person)
//!   *within one event*. An identifier whose refusals exceed
//!   `blocklist_after` is blocklisted at once (later steps of the same event
//!   see it); its refusals keep counting if it is charged again.
//! * **Persons**: every identifier carried by an accepted event exists
//!   (a singleton person at first), whether or not its links were refused.
//!   Its first ts is the smallest `ts` of the accepted events carrying it.
//! * **Counted for**: the person holding `user:<value>` when the event has a
//!   good `user`, else the one holding its bytewise-smallest identifier, once
//!   all its link steps are done.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

/// The largest payload accepted (SPEC 2): 64 KiB.
const MAX_PAYLOAD: usize = 64 * 1024;

/// `ts` must lie in `0 <= ts < 2^53` (SPEC 3).
const TS_END: i64 = 1 << 53;

/// Built-in event types other than `tick` (SPEC 2).
const BUILT_INS: [&str; 5] = ["auction", "bid", "impression", "click", "install"];

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// Every reason [`Profiles::counts`] always reports, even at zero.
const REASONS: [&str; 8] = [
    "applied",
    "duplicate",
    "stale",
    "bad_identifier",
    "no_identifier",
    "links_refused",
    "rejected",
    "future",
];

/// One counter definition: `[[counters]] name, event, half_life`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSpec {
    /// The counter's name (the key in `counters` and in bid features).
    pub name: String,
    /// The event type it counts.
    pub event: String,
    /// Its half-life in milliseconds.
    pub half_life_ms: i64,
}

/// The parts of a profile process's configuration that decide what it knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The event types the process reads (SPEC 11 `types`; built-ins and custom names).
    pub types: Vec<String>,
    /// Configured custom types (SPEC 2 rules), so their topics decode.
    pub custom_types: Vec<String>,
    /// The counters, in configuration order.
    pub counters: Vec<CounterSpec>,
    /// The process's txid prefixes (SPEC 4); empty = all. Weight w = 1/rate, rate = sum of 16^-len(p) (1 when empty).
    pub prefixes: Vec<String>,
    /// How long (of txid creation time) a (type, txid) is remembered, by
    /// type (SPEC 11 v1.2); a type not here takes its default
    /// ([`Setup::dedup_of`]: impression 1 h, click 3 h, any other 8 days).
    pub dedup_ms: BTreeMap<String, i64>,
    /// How far ahead of the reference a txid or `ts` may be; default 10 minutes.
    pub max_future_ms: i64,
    /// The most identifiers a person may hold; default 50.
    pub max_ids: usize,
    /// Refusals an identifier may be charged before it is blocklisted; default 100.
    pub blocklist_after: u64,
    /// The most identifiers an event may carry as sent (`user` and each key
    /// of `ids`), default 16; beyond it the event is refused whole
    /// (`too_many_ids`, SPEC 11 v1.2).
    pub max_ids_per_event: usize,
}

impl Default for Setup {
    /// The defaults SPEC 11 gives: types impression, click, install; no custom
    /// types, counters or prefixes.
    fn default() -> Setup {
        Setup {
            types: vec![
                "impression".to_string(),
                "click".to_string(),
                "install".to_string(),
            ],
            custom_types: Vec::new(),
            counters: Vec::new(),
            prefixes: Vec::new(),
            dedup_ms: BTreeMap::new(),
            max_future_ms: 10 * MINUTE_MS,
            max_ids: 50,
            blocklist_after: 100,
            max_ids_per_event: 16,
        }
    }
}

impl Setup {
    /// The `dedup` horizon of a type: as configured, else SPEC 11's
    /// default (impression 1 h, click 3 h, install and any other 8 days).
    pub fn dedup_of(&self, type_name: &str) -> i64 {
        self.dedup_ms
            .get(type_name)
            .copied()
            .unwrap_or(match type_name {
                "impression" => HOUR_MS,
                "click" => 3 * HOUR_MS,
                _ => 8 * DAY_MS,
            })
    }

    /// Reads a profile process's TOML configuration (SPEC 11). Only `types`,
    /// `custom_types`, `prefixes`, `dedup`, `max_future`, `max_ids`,
    /// `blocklist_after` and `[[counters]]` matter; other keys are ignored.
    /// `types` defaults to impression, click, install and the custom types.
    pub fn from_toml(text: &str) -> Result<Setup, String> {
        let table: toml::Table = text.parse().map_err(|e| format!("config: {e}"))?;
        let mut setup = Setup::default();
        if let Some(value) = table.get("custom_types") {
            setup.custom_types = strings("custom_types", value)?;
        }
        match table.get("types") {
            Some(value) => setup.types = strings("types", value)?,
            None => setup.types.extend(setup.custom_types.iter().cloned()),
        }
        if let Some(value) = table.get("prefixes") {
            setup.prefixes = strings("prefixes", value)?;
        }
        match table.get("dedup") {
            None => {}
            // A single duration sets every type.
            Some(value @ toml::Value::String(_)) => {
                let d = duration("dedup", value)?;
                setup.dedup_ms = setup.types.iter().map(|t| (t.clone(), d)).collect();
            }
            Some(toml::Value::Table(by_type)) => {
                for (t, value) in by_type {
                    setup
                        .dedup_ms
                        .insert(t.clone(), duration(&format!("dedup.{t}"), value)?);
                }
            }
            Some(_) => return Err("dedup: a duration or a table of durations by type".into()),
        }
        if let Some(value) = table.get("max_future") {
            setup.max_future_ms = duration("max_future", value)?;
        }
        if let Some(value) = table.get("max_ids") {
            let n = value.as_integer().filter(|n| *n >= 1);
            let n = n.ok_or("max_ids: must be a positive integer")?;
            setup.max_ids = n as usize;
        }
        if let Some(value) = table.get("max_ids_per_event") {
            let n = value.as_integer().filter(|n| *n >= 1);
            let n = n.ok_or("max_ids_per_event: must be a positive integer")?;
            setup.max_ids_per_event = n as usize;
        }
        if let Some(value) = table.get("blocklist_after") {
            let n = value.as_integer().filter(|n| *n >= 0);
            let n = n.ok_or("blocklist_after: must be a non-negative integer")?;
            setup.blocklist_after = n as u64;
        }
        if let Some(value) = table.get("counters") {
            let entries = value
                .as_array()
                .ok_or("counters: must be an array of tables ([[counters]])")?;
            for entry in entries {
                let text = |key: &str| -> Result<String, String> {
                    match entry.get(key).and_then(|v| v.as_str()) {
                        Some(s) => Ok(s.to_string()),
                        None => Err(format!("counters.{key}: required string")),
                    }
                };
                let half_life_ms = crate::parse_duration(&text("half_life")?)
                    .map_err(|e| format!("counters.half_life: {e}"))?;
                setup.counters.push(CounterSpec {
                    name: text("name")?,
                    event: text("event")?,
                    half_life_ms,
                });
            }
        }
        Ok(setup)
    }

    /// The weight of one counted event: `1/rate` (SPEC 4, 11), 1 without prefixes.
    pub fn weight(&self) -> f64 {
        if self.prefixes.is_empty() {
            return 1.0;
        }
        let rate: f64 = self
            .prefixes
            .iter()
            .map(|p| 16f64.powi(-(p.len() as i32)))
            .sum();
        1.0 / rate
    }
}

fn strings(key: &str, value: &toml::Value) -> Result<Vec<String>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("{key}: must be an array of strings"))?;
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{key}: must be an array of strings"))
        })
        .collect()
}

fn duration(key: &str, value: &toml::Value) -> Result<i64, String> {
    let text = value
        .as_str()
        .ok_or_else(|| format!("{key}: must be a duration string like \"5s\""))?;
    crate::parse_duration(text).map_err(|e| format!("{key}: {e}"))
}

/// One event counted for a person.
#[derive(Debug, Clone)]
struct Counted {
    kind: String,
    txid: String,
    ts: i64,
    /// The good identifiers it carried, sorted bytewise.
    ids: Vec<String>,
    /// The identifier whose person it counts for (that person only grows).
    counted_for: String,
}

/// What a profile process must know after receiving some messages.
#[derive(Debug, Clone)]
pub struct Profiles {
    setup: Setup,
    /// Every (type, txid) taken by a first copy.
    taken: BTreeSet<(String, String)>,
    counts: BTreeMap<String, u64>,
    /// Identifier -> index into `persons`.
    person_of: BTreeMap<String, usize>,
    /// Persons by index; an absorbed person is left empty, its index unused.
    persons: Vec<BTreeSet<String>>,
    /// Identifier -> smallest `ts` of an accepted event carrying it.
    first_ts: BTreeMap<String, i64>,
    /// Identifier -> refusals charged so far.
    refusals: BTreeMap<String, u64>,
    blocklisted: BTreeSet<String>,
    /// Every counted event, in receive order.
    events: Vec<Counted>,
    /// Every merge: `(ts, txid, master, absorbed)`.
    merges: Vec<(i64, String, String, String)>,
}

/// The outcome of the wire checks (SPEC 1-3) for one message.
enum Wire {
    /// Not subscribed to: as if never sent.
    NotReceived,
    /// Received and refused.
    Rejected,
    /// A well-formed event.
    Event {
        kind: String,
        txid: String,
        created: i64,
        ts: i64,
        body: Map<String, Value>,
    },
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// `[a-z][a-z0-9_]{0,31}`.
fn is_kind(kind: &str) -> bool {
    let b = kind.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// 1-256 bytes without U+0000.
fn is_value(value: &str) -> bool {
    !value.is_empty() && value.len() <= 256 && !value.contains('\u{0}')
}

impl Profiles {
    /// A profile process that has received nothing yet.
    pub fn new(setup: Setup) -> Profiles {
        let counts = REASONS.iter().map(|r| (r.to_string(), 0)).collect();
        Profiles {
            setup,
            taken: BTreeSet::new(),
            counts,
            person_of: BTreeMap::new(),
            persons: Vec::new(),
            first_ts: BTreeMap::new(),
            refusals: BTreeMap::new(),
            blocklisted: BTreeSet::new(),
            events: Vec::new(),
            merges: Vec::new(),
        }
    }

    fn count(&mut self, reason: &str) {
        *self.counts.entry(reason.to_string()).or_insert(0) += 1;
    }

    fn decode(&self, topic: &[u8], payload: &[u8]) -> Wire {
        // Which subscription (`<type>-<prefix>`) lets the topic in, if any.
        let mut received = None;
        for kind in &self.setup.types {
            if kind == "tick" {
                continue;
            }
            let head = format!("{kind}-");
            let Some(rest) = topic.strip_prefix(head.as_bytes()) else {
                continue;
            };
            let wanted = self.setup.prefixes.is_empty()
                || self
                    .setup
                    .prefixes
                    .iter()
                    .any(|p| rest.starts_with(p.as_bytes()));
            if wanted {
                received = Some((kind.clone(), rest));
                break;
            }
        }
        let Some((kind, rest)) = received else {
            return Wire::NotReceived;
        };

        let decodable =
            BUILT_INS.contains(&kind.as_str()) || self.setup.custom_types.contains(&kind);
        if !decodable || rest.len() != 32 || !rest.iter().all(|b| is_lower_hex(*b)) {
            return Wire::Rejected;
        }
        let txid = String::from_utf8(rest.to_vec()).expect("hex is ASCII");
        let created = i64::from_str_radix(&txid[20..], 16).expect("12 hex digits fit");

        if payload.len() > MAX_PAYLOAD {
            return Wire::Rejected;
        }
        let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(payload) else {
            return Wire::Rejected;
        };
        if body.get("type") != Some(&Value::String(kind.clone())) {
            return Wire::Rejected;
        }
        if body.get("txid") != Some(&Value::String(txid.clone())) {
            return Wire::Rejected;
        }
        let ts = match body.get("ts") {
            Some(Value::Number(n)) if !n.is_f64() => n.as_i64(),
            _ => None,
        };
        let Some(ts) = ts.filter(|ts| (0..TS_END).contains(ts)) else {
            return Wire::Rejected;
        };
        Wire::Event {
            kind,
            txid,
            created,
            ts,
            body,
        }
    }

    /// The good identifiers of an event in link order (`user`, then `ids`
    /// sorted by kind), counting each bad one.
    fn identifiers(&mut self, body: &Map<String, Value>) -> Vec<String> {
        let mut out = Vec::new();
        let mut bad = 0;
        match body.get("user") {
            None => {}
            Some(Value::String(value)) if is_value(value) => out.push(format!("user:{value}")),
            Some(_) => bad += 1,
        }
        match body.get("ids") {
            None => {}
            Some(Value::Object(ids)) => {
                // serde_json's Map is a BTreeMap here: iteration is by kind, bytewise.
                let mut by_kind: BTreeMap<&str, &Value> = BTreeMap::new();
                for (kind, value) in ids {
                    by_kind.insert(kind.as_str(), value);
                }
                for (kind, value) in by_kind {
                    match value {
                        Value::String(value)
                            if is_kind(kind) && kind != "user" && is_value(value) =>
                        {
                            out.push(format!("{kind}:{value}"))
                        }
                        _ => bad += 1,
                    }
                }
            }
            Some(_) => bad += 1,
        }
        for _ in 0..bad {
            self.count("bad_identifier");
        }
        out
    }

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
        let (kind, txid, created, ts, body) = match self.decode(topic, payload) {
            Wire::NotReceived => return,
            Wire::Rejected => return self.count("rejected"),
            Wire::Event {
                kind,
                txid,
                created,
                ts,
                body,
            } => (kind, txid, created, ts, body),
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
        let ids = self.identifiers(&body);
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

    /// Applies an event's links, one step at a time (see the module docs).
    fn link(&mut self, ids: &[String], ts: i64, txid: &str) {
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
            let (size_p, size_q) = (self.persons[p].len(), self.persons[q].len());
            if size_p + size_q <= self.setup.max_ids {
                // Logged: the merged person's master, and the other side's
                // master as it stood (whichever side the master came from).
                let (mp, mq) = (self.master_of(p), self.master_of(q));
                let absorbed = std::mem::take(&mut self.persons[q]);
                for id in &absorbed {
                    self.person_of.insert(id.clone(), p);
                }
                self.persons[p].extend(absorbed);
                let master = self.master_of(p);
                let other = if master == mp { mq } else { mp };
                self.merges.push((ts, txid.to_string(), master, other));
                continue;
            }
            self.count("links_refused");
            let mut capped = Vec::new();
            if size_p >= size_q {
                capped.push((p, q));
            }
            if size_q >= size_p {
                capped.push((q, p));
            }
            for (cap, other) in capped {
                for id in ids {
                    if self.person_of[id] == cap && charged.insert((id.clone(), other)) {
                        let refusals = self.refusals.entry(id.clone()).or_insert(0);
                        *refusals += 1;
                        if *refusals > self.setup.blocklist_after {
                            self.blocklisted.insert(id.clone());
                        }
                    }
                }
            }
        }
    }

    /// The identifier of person `p` with the smallest (first ts, identifier).
    fn master_of(&self, p: usize) -> String {
        self.persons[p]
            .iter()
            .min_by_key(|m| (self.first_ts[*m], m.as_str()))
            .expect("a person is never empty")
            .clone()
    }

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

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed moment: 2026-01-01T00:00:00Z.
    const T0: i64 = 1_767_225_600_000;
    const HOUR: i64 = 60 * MINUTE_MS;

    fn txid(random: &str, created: i64) -> String {
        let random = format!("{random:0<20}");
        assert_eq!(random.len(), 20);
        format!("{random}{created:012x}")
    }

    fn setup() -> Setup {
        Setup {
            counters: vec![
                CounterSpec {
                    name: "clk_1h".to_string(),
                    event: "click".to_string(),
                    half_life_ms: HOUR,
                },
                CounterSpec {
                    name: "ins_1d".to_string(),
                    event: "install".to_string(),
                    half_life_ms: DAY_MS,
                },
            ],
            ..Setup::default()
        }
    }

    /// Sends `{"type", "txid", "ts"}` plus the fields of `extra`, reference and
    /// clock far enough that nothing is future or stale.
    fn send(p: &mut Profiles, kind: &str, tx: &str, ts: i64, extra: Value) {
        let mut body = json!({"type": kind, "txid": tx, "ts": ts});
        for (k, v) in extra.as_object().expect("an object") {
            body[k] = v.clone();
        }
        let topic = format!("{kind}-{tx}");
        p.receive(
            topic.as_bytes(),
            body.to_string().as_bytes(),
            T0 + DAY_MS,
            None,
        );
    }

    fn count(p: &Profiles, reason: &str) -> u64 {
        p.counts()[reason]
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

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
    fn bad_identifiers_are_dropped_and_the_others_kept() {
        let mut p = Profiles::new(setup());
        let ids = json!({
            "Bad": "x", "member": "m1", "user": "u", "idfa": "", "ok": 3,
            "nul": "a\u{0}b", "long": "x".repeat(257), "k23456789012345678901234567890123": "v",
            "fine": "y".repeat(256),
        });
        send(
            &mut p,
            "click",
            &txid("c1", T0),
            T0,
            json!({"user": 5, "ids": ids}),
        );
        assert_eq!(count(&p, "bad_identifier"), 8);
        assert_eq!(count(&p, "applied"), 1);
        let fine = format!("fine:{}", "y".repeat(256));
        assert_eq!(p.person("member:m1"), vec![fine, "member:m1".to_string()]);
        assert_eq!(p.get("member:m1", T0)["counts"], json!({"click": 1}));
        assert_eq!(p.get("user:u", T0)["size"], json!(1));

        // Left with no identifier: counted and ignored, but it was the event.
        let tx = txid("c2", T0);
        send(&mut p, "click", &tx, T0, json!({"ids": ["member", "m1"]}));
        send(&mut p, "click", &txid("c3", T0), T0, json!({}));
        assert_eq!(count(&p, "bad_identifier"), 9);
        assert_eq!(count(&p, "no_identifier"), 2);
        send(&mut p, "click", &tx, T0, json!({"user": "later"}));
        assert_eq!(count(&p, "duplicate"), 1);
        assert_eq!(p.get("user:later", T0)["counts"], json!({}));

        // A good user with a non-object ids: counted once, user kept.
        send(
            &mut p,
            "click",
            &txid("c4", T0),
            T0,
            json!({"user": "u", "ids": null}),
        );
        assert_eq!(count(&p, "bad_identifier"), 10);
        assert_eq!(p.get("user:u", T0)["counts"], json!({"click": 1}));
        assert_eq!(count(&p, "applied"), 2);
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

    #[test]
    fn setup_reads_the_toml_configuration() {
        let s = Setup::from_toml(
            r#"
            name = "p"
            custom_types = ["signup"]
            prefixes = ["a"]
            dedup = "2d"
            max_ids = 7
            [[counters]]
            name = "clk_7d"
            event = "click"
            half_life = "7d"
            "#,
        )
        .unwrap();
        assert_eq!(s.types, vec!["impression", "click", "install", "signup"]);
        assert_eq!(
            s.dedup_of("click"),
            2 * DAY_MS,
            "one duration sets every type"
        );
        let by_type = Setup::from_toml("[dedup]\nclick = \"5h\"\n").unwrap();
        assert_eq!(by_type.dedup_of("click"), 5 * HOUR_MS);
        assert_eq!(
            by_type.dedup_of("impression"),
            HOUR_MS,
            "SPEC 11 v1.2 defaults"
        );
        assert_eq!(by_type.dedup_of("install"), 8 * DAY_MS);
        assert_eq!(by_type.dedup_of("open"), 8 * DAY_MS);
        assert_eq!(s.max_future_ms, 10 * MINUTE_MS);
        assert_eq!((s.max_ids, s.blocklist_after), (7, 100));
        assert_eq!(s.counters[0].half_life_ms, 7 * DAY_MS);
        assert!(close(s.weight(), 16.0));
    }
}
