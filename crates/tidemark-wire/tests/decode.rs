//! Every rejection reason, the accepted shapes, and properties of the decoder.

use proptest::prelude::*;
use tidemark_wire::*;

const TX: &str = "3fa9c0ffee0011223344018bcfe5687b";

fn decoder() -> Decoder {
    Decoder::new(Types::new(&["open"]).unwrap())
}

fn decode(topic: &str, payload: &str) -> Result<Message<'static>, Reject> {
    let topic: &'static str = Box::leak(topic.to_owned().into_boxed_str());
    let payload: &'static str = Box::leak(payload.to_owned().into_boxed_str());
    decoder().decode(topic.as_bytes(), payload.as_bytes())
}

fn event(topic: &str, payload: &str) -> Event<'static> {
    match decode(topic, payload) {
        Ok(Message::Event(e)) => e,
        other => panic!("expected an event, got {other:?}"),
    }
}

#[test]
fn accepts_a_bid_with_features_price_and_user() {
    let e = event(
        &format!("bid-{TX}"),
        &format!(
            r#"{{"type":"bid","txid":"{TX}","ts":1700000000200,"features":{{"app":"x","n":3,"ok":true}},"price":1.5,"user":"u1","extra":[1]}}"#
        ),
    );
    assert_eq!(e.kind, EventType::Bid);
    assert_eq!(e.txid.as_str(), TX);
    assert_eq!(e.ts, 1_700_000_000_200);
    assert_eq!(e.price, Some(1.5));
    assert_eq!(e.user.as_deref(), Some("u1"));
    let f = e.features.unwrap();
    assert_eq!(f.dropped, 0);
    assert_eq!(f.json, r#"{"app":"x","n":3,"ok":true}"#);
}

#[test]
fn drops_and_counts_non_scalar_features() {
    let e = event(
        &format!("bid-{TX}"),
        &format!(
            r#"{{"type":"bid","txid":"{TX}","ts":1,"features":{{"a":"x","l":[1],"o":{{}},"z":null}}}}"#
        ),
    );
    let f = e.features.unwrap();
    assert_eq!(f.dropped, 3);
    assert_eq!(f.json, r#"{"a":"x"}"#);
}

#[test]
fn accepts_other_types_and_ignores_unknown_fields() {
    for t in ["auction", "impression", "click", "install", "open"] {
        let e = event(
            &format!("{t}-{TX}"),
            &format!(r#"{{"type":"{t}","txid":"{TX}","ts":5,"whatever":{{"x":1}}}}"#),
        );
        assert_eq!(e.ts, 5);
        assert!(e.features.is_none());
    }
}

#[test]
fn accepts_a_tick_with_sent_counts() {
    match decode(
        "tick",
        r#"{"type":"tick","publisher":"p1","ts":42,"sent":{"bid-a":10,"click-0":2}}"#,
    ) {
        Ok(Message::Tick(t)) => {
            assert_eq!(t.publisher, "p1");
            assert_eq!(t.ts, 42);
            assert_eq!(
                t.sent,
                vec![("bid-a".to_owned(), 10), ("click-0".to_owned(), 2)]
            );
        }
        other => panic!("{other:?}"),
    }
}

fn rejected(topic: &str, payload: &str) -> Reject {
    decode(topic, payload).expect_err("should be rejected")
}

#[test]
fn rejects_wrong_frame_count() {
    let d = decoder();
    assert_eq!(d.decode_frames(&[b"tick"]), Err(Reject::FrameCount(1)));
    assert_eq!(
        d.decode_frames(&[b"a", b"b", b"c"]),
        Err(Reject::FrameCount(3))
    );
    assert_eq!(d.decode_frames(&[]), Err(Reject::FrameCount(0)));
}

#[test]
fn rejects_oversize_payloads() {
    let big = format!(
        r#"{{"type":"click","txid":"{TX}","ts":1,"pad":"{}"}}"#,
        "x".repeat(MAX_PAYLOAD)
    );
    assert_eq!(
        rejected(&format!("click-{TX}"), &big),
        Reject::Oversize(big.len())
    );
    // A topic over 128 bytes is oversize too, whatever it holds.
    let p = format!(r#"{{"type":"click","txid":"{TX}","ts":1}}"#);
    let long = format!("click-{TX}{}", "0".repeat(MAX_TOPIC));
    assert_eq!(rejected(&long, &p), Reject::Oversize(long.len()));
}

#[test]
fn rejects_bad_topics() {
    let p = format!(r#"{{"type":"click","txid":"{TX}","ts":1}}"#);
    assert_eq!(rejected("click", &p), Reject::BadTopic);
    assert_eq!(rejected("", &p), Reject::BadTopic);
    assert_eq!(rejected(&format!("close-{TX}"), &p), Reject::UnknownType);
    assert_eq!(rejected(&format!("tickle-{TX}"), &p), Reject::UnknownType);
    assert_eq!(rejected("tickle", &p), Reject::BadTopic);
    assert_eq!(rejected(&format!("tick-{TX}"), &p), Reject::UnknownType);
    assert_eq!(rejected("click-3FA9", &p), Reject::BadTxid);
    assert_eq!(rejected(&format!("click-{TX}0"), &p), Reject::BadTxid);
    assert_eq!(
        decoder().decode(b"click-\xff", p.as_bytes()),
        Err(Reject::BadTopic)
    );
}

#[test]
fn rejects_bad_payload_encodings() {
    let topic = format!("click-{TX}");
    assert_eq!(
        decoder().decode(topic.as_bytes(), b"{\"type\":\"\xff\"}"),
        Err(Reject::BadUtf8)
    );
    assert_eq!(rejected(&topic, "{"), Reject::BadJson);
    assert_eq!(rejected(&topic, ""), Reject::BadJson);
    assert_eq!(rejected(&topic, r#"{"type":"click",}"#), Reject::BadJson);
    assert_eq!(rejected(&topic, r#"{"ts":1,"ts":2}"#), Reject::BadJson);
    assert_eq!(rejected(&topic, "[1,2]"), Reject::NotObject);
    assert_eq!(rejected(&topic, "\"click\""), Reject::NotObject);
    assert_eq!(rejected(&topic, "null"), Reject::NotObject);
}

#[test]
fn rejects_missing_fields() {
    let topic = format!("bid-{TX}");
    assert_eq!(
        rejected(&topic, r#"{"txid":"x","ts":1}"#),
        Reject::MissingField("type")
    );
    assert_eq!(
        rejected(&topic, r#"{"type":"bid","ts":1}"#),
        Reject::MissingField("txid")
    );
    assert_eq!(
        rejected(&topic, &format!(r#"{{"type":"bid","txid":"{TX}"}}"#)),
        Reject::MissingField("ts")
    );
    assert_eq!(
        rejected(
            &topic,
            &format!(r#"{{"type":"bid","txid":"{TX}","ts":null}}"#)
        ),
        Reject::MissingField("ts")
    );
    assert_eq!(
        rejected(&topic, &format!(r#"{{"type":"bid","txid":"{TX}","ts":1}}"#)),
        Reject::MissingField("features")
    );
    assert_eq!(
        rejected("tick", r#"{"type":"tick","ts":1}"#),
        Reject::MissingField("publisher")
    );
    assert_eq!(
        rejected("tick", r#"{"type":"tick","publisher":"p"}"#),
        Reject::MissingField("ts")
    );
}

#[test]
fn rejects_mistyped_fields() {
    let bid = format!("bid-{TX}");
    let cases = [
        (format!(r#"{{"type":1,"txid":"{TX}","ts":1}}"#), "type"),
        (r#"{"type":"bid","txid":7,"ts":1}"#.to_string(), "txid"),
        (format!(r#"{{"type":"bid","txid":"{TX}","ts":"1"}}"#), "ts"),
        (format!(r#"{{"type":"bid","txid":"{TX}","ts":1.5}}"#), "ts"),
        (
            format!(r#"{{"type":"bid","txid":"{TX}","ts":1,"features":[1]}}"#),
            "features",
        ),
        (
            format!(r#"{{"type":"bid","txid":"{TX}","ts":1,"features":{{}},"price":"1"}}"#),
            "price",
        ),
        (
            format!(r#"{{"type":"bid","txid":"{TX}","ts":1,"features":{{}},"user":5}}"#),
            "user",
        ),
    ];
    for (payload, field) in cases {
        assert_eq!(
            rejected(&bid, &payload),
            Reject::MistypedField(field),
            "{payload}"
        );
    }
    assert_eq!(
        rejected(
            "tick",
            r#"{"type":"tick","publisher":"p","ts":1,"sent":{"bid-a":-1}}"#
        ),
        Reject::MistypedField("sent")
    );
    assert_eq!(
        rejected("tick", r#"{"type":"tick","publisher":3,"ts":1}"#),
        Reject::MistypedField("publisher")
    );
}

#[test]
fn refuses_at_the_door_what_postgresql_cannot_hold() {
    let bid = format!("bid-{TX}");
    let with = |features: &str, extra: &str| {
        format!(r#"{{"type":"bid","txid":"{TX}","ts":1,"features":{features}{extra}}}"#)
    };
    for payload in [
        with(r#"{"app":"a\u0000b"}"#, ""),
        with(r#"{"a\u0000":"x"}"#, ""),
        with(r#"{"app":"x"}"#, r#","user":"\u0000""#),
    ] {
        assert_eq!(rejected(&bid, &payload), Reject::NulChar, "{payload}");
    }
    // An escaped backslash before `u0000` is not U+0000.
    let ok = event(&bid, &with(r#"{"app":"\\u0000"}"#, ""));
    assert_eq!(ok.features.unwrap().json, r#"{"app":"\\u0000"}"#);
    // U+0000 inside a value that is dropped anyway does not matter.
    let e = event(&bid, &with(r#"{"app":"x","l":["\u0000"]}"#, ""));
    assert_eq!(e.features.unwrap().json, r#"{"app":"x"}"#);
    assert_eq!(
        rejected("tick", r#"{"type":"tick","publisher":"p\u0000","ts":1}"#),
        Reject::NulChar
    );
    for ts in [
        "-1",
        "9007199254740992",
        "99999999999999999999999",
        "-99999999999999999999",
    ] {
        assert_eq!(
            rejected(
                &bid,
                &format!(r#"{{"type":"bid","txid":"{TX}","ts":{ts},"features":{{}}}}"#)
            ),
            Reject::TsRange,
            "{ts}"
        );
    }
    let top = event(
        &bid,
        &format!(r#"{{"type":"bid","txid":"{TX}","ts":9007199254740991,"features":{{}}}}"#),
    );
    assert_eq!(top.ts, (1 << 53) - 1);
    assert_eq!(
        rejected(&bid, &with(r#"{"n":1e999}"#, "")),
        Reject::NonFinite
    );
    assert_eq!(
        rejected(&bid, &with(r#"{"n":-1e400}"#, "")),
        Reject::NonFinite
    );
    assert_eq!(
        rejected(&bid, &with("{}", r#","price":1e999"#)),
        Reject::NonFinite
    );
    assert_eq!(
        rejected(
            &format!("impression-{TX}"),
            &format!(r#"{{"type":"impression","txid":"{TX}","ts":1,"price":-2e308}}"#)
        ),
        Reject::NonFinite
    );
    // Tiny numbers round to zero: finite, accepted.
    let e = event(&bid, &with(r#"{"n":1e-999}"#, ""));
    assert_eq!(e.features.unwrap().json, r#"{"n":1e-999}"#);
}

#[test]
fn rejects_topic_payload_mismatch() {
    let other = "0000000000000000000000018bcfe5687b";
    assert_eq!(
        rejected(
            &format!("click-{TX}"),
            &format!(r#"{{"type":"install","txid":"{TX}","ts":1}}"#)
        ),
        Reject::TopicMismatch("type")
    );
    assert_eq!(
        rejected(
            &format!("click-{TX}"),
            &format!(r#"{{"type":"click","txid":"{other}","ts":1}}"#)
        ),
        Reject::TopicMismatch("txid")
    );
    assert_eq!(
        rejected("tick", r#"{"type":"click","publisher":"p","ts":1}"#),
        Reject::TopicMismatch("type")
    );
}

#[test]
fn every_reason_has_a_distinct_name() {
    let mut names = Reject::REASONS.to_vec();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), Reject::REASONS.len());
}

#[test]
fn encoded_events_decode() {
    let tx = Txid::new(0xabc, 1_700_000_000_000);
    let mut p = String::new();
    event_payload(
        &mut p,
        "bid",
        &tx,
        1_700_000_000_010,
        r#""features":{"a":"b"},"price":2"#,
    );
    let e = event(&topic("bid", &tx), &p);
    assert_eq!((e.txid, e.ts, e.price), (tx, 1_700_000_000_010, Some(2.0)));
    let t = tick_payload("p", 9, &[("bid-a".into(), 3)]);
    assert!(matches!(decode("tick", &t), Ok(Message::Tick(_))));
}

fn cases() -> u32 {
    // TIDEMARK_FUZZ_CASES=10000000 turns this into a long random-input run.
    std::env::var("TIDEMARK_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn arbitrary_bytes_never_panic(topic in proptest::collection::vec(any::<u8>(), 0..48),
                                   payload in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decoder().decode(&topic, &payload);
    }

    #[test]
    fn json_like_noise_never_panics(topic in "(bid|click|tick|open|x)(-[0-9a-f]{32})?",
                                    payload in r#"\{("(type|txid|ts|features|price|user|publisher|sent)":(null|1|-1|1.5|"[a-z0-9]{0,3}"|\{\}|\[\]|\{"a":\[1\]\}),?){0,6}\}"#) {
        let _ = decoder().decode(topic.as_bytes(), payload.as_bytes());
    }

    #[test]
    fn round_trip(random in any::<u128>(), created in 0u64..(1 << 48), ts in 0i64..(1 << 52),
                  app in "[a-z]{0,8}", n in any::<i32>(), price in proptest::option::of(0.0f64..100.0)) {
        let tx = Txid::new(random, created);
        let mut extra = format!(r#""features":{{"app":"{app}","n":{n}}}"#);
        if let Some(p) = price { extra.push_str(&format!(r#","price":{p}"#)); }
        let mut p = String::new();
        event_payload(&mut p, "bid", &tx, ts, &extra);
        let topic = topic("bid", &tx);
        let d = decoder();
        match d.decode(topic.as_bytes(), p.as_bytes()) {
            Ok(Message::Event(e)) => {
                prop_assert_eq!(e.txid, tx);
                prop_assert_eq!(e.ts, ts);
                prop_assert_eq!(e.price, price);
                prop_assert_eq!(e.features.unwrap().dropped, 0);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}
