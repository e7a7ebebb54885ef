//! Decoding and validating one ZeroMQ message (SPEC 2-3).
//!
//! The decoder borrows from the received frames: string fields without escapes,
//! and a bid's features, are slices of the payload, so a valid message costs no
//! allocation beyond what the caller chooses to keep.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{EventType, Txid, Types};

/// Largest payload accepted (SPEC 2).
pub const MAX_PAYLOAD: usize = 64 * 1024;

/// Largest topic accepted (SPEC 2).
pub const MAX_TOPIC: usize = 128;

/// The transport limit (SPEC 2, v1.3): every socket reading the wire sets
/// ZeroMQ's maximum message size to it, so nothing larger is held whole in
/// memory. A frame over [`MAX_PAYLOAD`] or [`MAX_TOPIC`] but within it is
/// read and refused alone ([`Reject::Oversize`]), costing nothing else.
pub const MAX_FRAME: usize = 1024 * 1024;

/// `ts` must be below 2^53 (SPEC 3): exact in a double, and a valid timestamptz.
pub const MAX_TS: i64 = 1 << 53;

/// One accepted message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message<'a> {
    /// An event of a transaction.
    Event(Event<'a>),
    /// A publisher heartbeat.
    Tick(Tick<'a>),
}

/// One event of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Event<'a> {
    /// Its type.
    pub kind: EventType,
    /// Its transaction.
    pub txid: Txid,
    /// The event's own time, milliseconds since the epoch.
    pub ts: i64,
    /// A bid's features: a JSON object whose values are all strings, numbers or bools.
    pub features: Option<Features<'a>>,
    /// A bid's or impression's `price`.
    pub price: Option<f64>,
    /// A bid's `user`.
    pub user: Option<Cow<'a, str>>,
    /// `user` and `ids` of any event, undecoded: shards ignore them and the
    /// profile process (SPEC 11) judges each identifier itself.
    pub identity: Identity<'a>,
    /// The whole payload, as received (validated UTF-8).
    pub payload: &'a str,
}

/// An event's identifiers as sent (SPEC 3 `user` and `ids`), not validated:
/// a bad identifier drops only itself (SPEC 11), never the event.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity<'a> {
    /// The `user` field's JSON text (`null` is absent).
    pub user: Option<&'a RawValue>,
    /// The `ids` field's JSON text (`null` is absent).
    pub ids: Option<&'a RawValue>,
}

impl PartialEq for Identity<'_> {
    fn eq(&self, other: &Self) -> bool {
        fn text(r: Option<&RawValue>) -> Option<&str> {
            r.map(RawValue::get)
        }
        text(self.user) == text(other.user) && text(self.ids) == text(other.ids)
    }
}

/// A bid's features as JSON text. Values of other kinds have been dropped
/// (and counted in `dropped`); when none were, the text is the payload's own.
#[derive(Debug, Clone, PartialEq)]
pub struct Features<'a> {
    /// The features object as JSON text.
    pub json: Cow<'a, str>,
    /// Values dropped for being of other kinds.
    pub dropped: u32,
}

/// A publisher heartbeat (SPEC 3): its current event time and what it has sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick<'a> {
    /// The publisher's name.
    pub publisher: Cow<'a, str>,
    /// Its current event time, ms.
    pub ts: i64,
    /// `(<type>-<first txid digit>, messages sent since the publisher started)`.
    pub sent: Vec<(String, u64)>,
}

/// Why a message was rejected. Every variant maps to a counter name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Not exactly two frames; carries the count seen.
    FrameCount(usize),
    /// Payload larger than [`MAX_PAYLOAD`], or topic larger than
    /// [`MAX_TOPIC`]; carries the frame's size.
    Oversize(usize),
    /// Topic is neither `tick` nor `<type>-<txid>`.
    BadTopic,
    /// Topic names a type this process does not know (includes `tick…` look-alikes).
    UnknownType,
    /// The txid in the topic is not 32 lowercase hex digits.
    BadTxid,
    /// Payload is not UTF-8.
    BadUtf8,
    /// Payload is not JSON.
    BadJson,
    /// Payload is JSON but not an object.
    NotObject,
    /// A required field is missing; names it.
    MissingField(&'static str),
    /// A field has the wrong JSON kind; names it.
    MistypedField(&'static str),
    /// The payload's `type` or `txid` differs from the topic's.
    TopicMismatch(&'static str),
    /// A used string (type, txid, publisher, user, a feature's name or value)
    /// holds U+0000, which PostgreSQL text and jsonb cannot store.
    NulChar,
    /// `ts` outside `0 <= ts < 2^53`.
    TsRange,
    /// A used number (price, a feature value) overflows a double.
    NonFinite,
}

impl Reject {
    /// Counter names, one per variant, in [`Reject::index`] order.
    pub const REASONS: [&'static str; 14] = [
        "frame_count",
        "oversize",
        "bad_topic",
        "unknown_type",
        "bad_txid",
        "bad_utf8",
        "bad_json",
        "not_object",
        "missing_field",
        "mistyped_field",
        "topic_mismatch",
        "nul_char",
        "ts_range",
        "non_finite",
    ];

    /// Its position in `REASONS`.
    pub fn index(&self) -> usize {
        match self {
            Reject::FrameCount(_) => 0,
            Reject::Oversize(_) => 1,
            Reject::BadTopic => 2,
            Reject::UnknownType => 3,
            Reject::BadTxid => 4,
            Reject::BadUtf8 => 5,
            Reject::BadJson => 6,
            Reject::NotObject => 7,
            Reject::MissingField(_) => 8,
            Reject::MistypedField(_) => 9,
            Reject::TopicMismatch(_) => 10,
            Reject::NulChar => 11,
            Reject::TsRange => 12,
            Reject::NonFinite => 13,
        }
    }

    /// Its counter name.
    pub fn reason(&self) -> &'static str {
        Self::REASONS[self.index()]
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reject::FrameCount(n) => write!(f, "expected 2 frames, got {n}"),
            Reject::Oversize(n) => write!(
                f,
                "a frame of {n} bytes exceeds its limit (topic {MAX_TOPIC}, payload {MAX_PAYLOAD})"
            ),
            Reject::BadTopic => f.write_str("topic is not `tick` nor `<type>-<txid>`"),
            Reject::UnknownType => f.write_str("unknown event type"),
            Reject::BadTxid => f.write_str("txid is not 32 lowercase hex digits"),
            Reject::BadUtf8 => f.write_str("payload is not UTF-8"),
            Reject::BadJson => f.write_str("payload is not valid JSON"),
            Reject::NotObject => f.write_str("payload is not a JSON object"),
            Reject::MissingField(k) => write!(f, "missing field `{k}`"),
            Reject::MistypedField(k) => write!(f, "field `{k}` has the wrong type"),
            Reject::TopicMismatch(k) => write!(f, "payload `{k}` differs from the topic's"),
            Reject::NulChar => f.write_str("a string holds U+0000"),
            Reject::TsRange => f.write_str("`ts` is outside 0 <= ts < 2^53"),
            Reject::NonFinite => f.write_str("a number is not finite"),
        }
    }
}

impl std::error::Error for Reject {}

/// Decodes messages for a given set of event types.
#[derive(Clone, Debug)]
pub struct Decoder {
    types: Types,
}

impl Decoder {
    /// A decoder for these types.
    pub fn new(types: Types) -> Decoder {
        Decoder { types }
    }

    /// The types it knows.
    pub fn types(&self) -> &Types {
        &self.types
    }

    /// Decodes a message given as its frames.
    pub fn decode_frames<'a>(&self, frames: &[&'a [u8]]) -> Result<Message<'a>, Reject> {
        match frames {
            [topic, payload] => self.decode(topic, payload),
            _ => Err(Reject::FrameCount(frames.len())),
        }
    }

    /// Decodes a two-frame message `[topic, payload]`.
    pub fn decode<'a>(&self, topic: &'a [u8], payload: &'a [u8]) -> Result<Message<'a>, Reject> {
        if payload.len() > MAX_PAYLOAD {
            return Err(Reject::Oversize(payload.len()));
        }
        if topic.len() > MAX_TOPIC {
            return Err(Reject::Oversize(topic.len()));
        }
        let topic = self.parse_topic(topic)?;
        let text = std::str::from_utf8(payload).map_err(|_| Reject::BadUtf8)?;
        let fields = parse_fields(text)?;
        match topic {
            None => decode_tick(&fields).map(Message::Tick),
            Some((kind, txid)) => self
                .decode_event(kind, txid, &fields, text)
                .map(Message::Event),
        }
    }

    /// `None` for `tick`, else the type and txid.
    fn parse_topic(&self, topic: &[u8]) -> Result<Option<(EventType, Txid)>, Reject> {
        if topic == b"tick" {
            return Ok(None);
        }
        let topic = std::str::from_utf8(topic).map_err(|_| Reject::BadTopic)?;
        let (name, txid) = topic.split_once('-').ok_or(Reject::BadTopic)?;
        let kind = self.types.lookup(name).ok_or(Reject::UnknownType)?;
        let txid = Txid::parse(txid).ok_or(Reject::BadTxid)?;
        Ok(Some((kind, txid)))
    }

    fn decode_event<'a>(
        &self,
        kind: EventType,
        txid: Txid,
        f: &Fields<'a>,
        payload: &'a str,
    ) -> Result<Event<'a>, Reject> {
        let ty = string(f.ty, "type")?.ok_or(Reject::MissingField("type"))?;
        if self.types.lookup(&ty) != Some(kind) {
            return Err(Reject::TopicMismatch("type"));
        }
        let tx = string(f.txid, "txid")?.ok_or(Reject::MissingField("txid"))?;
        if tx.as_bytes() != txid.as_str().as_bytes() {
            return Err(Reject::TopicMismatch("txid"));
        }
        let ts = timestamp(f.ts)?;
        let (features, price, user) = match kind {
            EventType::Bid => (
                Some(features(
                    f.features.ok_or(Reject::MissingField("features"))?,
                )?),
                number(f.price, "price")?,
                string(f.user, "user")?,
            ),
            EventType::Impression => (None, number(f.price, "price")?, None),
            _ => (None, None, None),
        };
        Ok(Event {
            kind,
            txid,
            ts,
            features,
            price,
            user,
            identity: Identity {
                user: f.user.filter(|r| !is_null(r)),
                ids: f.ids.filter(|r| !is_null(r)),
            },
            payload,
        })
    }
}

fn decode_tick<'a>(f: &Fields<'a>) -> Result<Tick<'a>, Reject> {
    let ty = string(f.ty, "type")?.ok_or(Reject::MissingField("type"))?;
    if ty != "tick" {
        return Err(Reject::TopicMismatch("type"));
    }
    let publisher = string(f.publisher, "publisher")?.ok_or(Reject::MissingField("publisher"))?;
    let ts = timestamp(f.ts)?;
    let sent = match f.sent {
        None => Vec::new(),
        Some(raw) => {
            let map: Vec<(String, u64)> = serde_json::from_str::<SentMap>(raw.get())
                .map_err(|_| Reject::MistypedField("sent"))?
                .0;
            map
        }
    };
    Ok(Tick {
        publisher,
        ts,
        sent,
    })
}

/// The fields Tidemark reads; anything else in the payload is skipped.
/// `RawValue` defers typing each field so a wrong type names its field.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<&'a RawValue>,
    #[serde(borrow, default)]
    txid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    features: Option<&'a RawValue>,
    #[serde(borrow, default)]
    price: Option<&'a RawValue>,
    #[serde(borrow, default)]
    user: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ids: Option<&'a RawValue>,
    #[serde(borrow, default)]
    publisher: Option<&'a RawValue>,
    #[serde(borrow, default)]
    sent: Option<&'a RawValue>,
}

fn parse_fields(text: &str) -> Result<Fields<'_>, Reject> {
    // serde's derived struct would also accept a JSON array; insist on an object.
    let starts_object = text.trim_start().starts_with('{');
    if starts_object {
        if let Ok(fields) = serde_json::from_str::<Fields<'_>>(text) {
            return Ok(fields);
        }
    }
    // Cold path: tell "not JSON" from "JSON, but not an object the right shape".
    match serde_json::from_str::<IgnoredAny>(text) {
        Err(_) => Err(Reject::BadJson),
        Ok(_) if !starts_object => Err(Reject::NotObject),
        // Valid JSON object that failed as `Fields`: a duplicated known key.
        Ok(_) => Err(Reject::BadJson),
    }
}

fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

fn string<'a>(
    raw: Option<&'a RawValue>,
    name: &'static str,
) -> Result<Option<Cow<'a, str>>, Reject> {
    match raw {
        None => Ok(None),
        Some(r) if is_null(r) => Ok(None),
        Some(r) => {
            let s = Cow::<'a, str>::deserialize(r).map_err(|_| Reject::MistypedField(name))?;
            if s.contains('\0') {
                return Err(Reject::NulChar);
            }
            Ok(Some(s))
        }
    }
}

/// Whether validated JSON text is a number literal (so a failed parse means overflow).
fn is_number_literal(raw: &str) -> bool {
    raw.starts_with(|c: char| c == '-' || c.is_ascii_digit())
}

/// serde_json refuses a literal such as `1e999` as out of range: the one way
/// JSON spells a non-finite number.
fn is_out_of_range(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("number out of range")
}

fn number(raw: Option<&RawValue>, name: &'static str) -> Result<Option<f64>, Reject> {
    match raw {
        None => Ok(None),
        Some(r) if is_null(r) => Ok(None),
        Some(r) => match serde_json::from_str::<f64>(r.get()) {
            Ok(x) if x.is_finite() => Ok(Some(x)),
            Ok(_) => Err(Reject::NonFinite),
            Err(_) if is_number_literal(r.get()) => Err(Reject::NonFinite),
            Err(_) => Err(Reject::MistypedField(name)),
        },
    }
}

fn timestamp(raw: Option<&RawValue>) -> Result<i64, Reject> {
    let r = raw
        .filter(|r| !is_null(r))
        .ok_or(Reject::MissingField("ts"))?;
    let text = r.get();
    match serde_json::from_str::<i64>(text) {
        Ok(ts) if (0..MAX_TS).contains(&ts) => Ok(ts),
        Ok(_) => Err(Reject::TsRange),
        // An integer literal too large for i64 is out of range too.
        Err(_) if is_number_literal(text) && text.bytes().skip(1).all(|b| b.is_ascii_digit()) => {
            Err(Reject::TsRange)
        }
        Err(_) => Err(Reject::MistypedField("ts")),
    }
}

fn features(raw: &RawValue) -> Result<Features<'_>, Reject> {
    let scan = serde_json::from_str::<FeatureScan>(raw.get()).map_err(|e| {
        if is_out_of_range(&e) {
            Reject::NonFinite
        } else {
            Reject::MistypedField("features")
        }
    })?;
    if scan.nul {
        return Err(Reject::NulChar);
    }
    if scan.dropped == 0 {
        return Ok(Features {
            json: Cow::Borrowed(raw.get()),
            dropped: 0,
        });
    }
    // Rare: rebuild the object with only the scalar values.
    let mut kept: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(raw.get()).map_err(|_| Reject::MistypedField("features"))?;
    kept.retain(|_, v| {
        matches!(
            v,
            serde_json::Value::String(_)
                | serde_json::Value::Number(_)
                | serde_json::Value::Bool(_)
        )
    });
    Ok(Features {
        json: Cow::Owned(serde_json::Value::Object(kept).to_string()),
        dropped: scan.dropped,
    })
}

/// Walks a features object counting values that are not string, number or
/// bool, and noting U+0000 in a name or a kept string.
struct FeatureScan {
    dropped: u32,
    nul: bool,
}

impl<'de> Deserialize<'de> for FeatureScan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor;
        impl<'de> Visitor<'de> for MapVisitor {
            type Value = FeatureScan;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FeatureScan, A::Error> {
                let mut scan = FeatureScan {
                    dropped: 0,
                    nul: false,
                };
                while let Some((name, value)) = map.next_entry::<IsScalar, IsScalar>()? {
                    match value {
                        IsScalar::Kept => {}
                        IsScalar::Nul => scan.nul = true,
                        IsScalar::Dropped => scan.dropped += 1,
                    }
                    scan.nul |= matches!(name, IsScalar::Nul);
                }
                Ok(scan)
            }
        }
        d.deserialize_map(MapVisitor)
    }
}

/// One feature name or value, classified.
enum IsScalar {
    Kept,
    /// A string holding U+0000.
    Nul,
    /// Null, an array or an object: dropped from the features.
    Dropped,
}

impl IsScalar {
    fn of_str(s: &str) -> IsScalar {
        if s.contains('\0') {
            IsScalar::Nul
        } else {
            IsScalar::Kept
        }
    }
}

impl<'de> Deserialize<'de> for IsScalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IsScalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<IsScalar, E> {
                Ok(IsScalar::Kept)
            }
            fn visit_i64<E>(self, _: i64) -> Result<IsScalar, E> {
                Ok(IsScalar::Kept)
            }
            fn visit_u64<E>(self, _: u64) -> Result<IsScalar, E> {
                Ok(IsScalar::Kept)
            }
            fn visit_f64<E>(self, _: f64) -> Result<IsScalar, E> {
                Ok(IsScalar::Kept)
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<IsScalar, E> {
                Ok(IsScalar::of_str(s))
            }
            fn visit_str<E>(self, s: &str) -> Result<IsScalar, E> {
                Ok(IsScalar::of_str(s))
            }
            fn visit_unit<E>(self) -> Result<IsScalar, E> {
                Ok(IsScalar::Dropped)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<IsScalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IsScalar::Dropped)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IsScalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(IsScalar::Dropped)
            }
        }
        d.deserialize_any(V)
    }
}

/// A tick's `sent` object: key → non-negative integer.
struct SentMap(Vec<(String, u64)>);

impl<'de> Deserialize<'de> for SentMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SentMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of counts")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SentMap, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, u64>()? {
                    out.push(entry);
                }
                Ok(SentMap(out))
            }
        }
        d.deserialize_map(V)
    }
}
