//! docs/contract.md's wire examples are what the decoder accepts: the page a
//! publisher writes from stays true to the code that reads it.

use tidemark_wire::*;

const PAGE: &str = include_str!("../../../docs/contract.md");

/// The `(topic, payload)` pairs of the page's example transaction: a topic
/// line, then its payload on indented lines.
fn examples() -> Vec<(String, String)> {
    let start = PAGE.find("```text\nauction-").expect("the example block");
    let block = &PAGE[start + 8..];
    let block = &block[..block.find("```").unwrap()];
    let mut out: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        if line.starts_with(' ') {
            out.last_mut().unwrap().1.push_str(line.trim());
        } else if !line.is_empty() {
            out.push((line.to_owned(), String::new()));
        }
    }
    out
}

#[test]
fn every_example_message_decodes_as_the_page_says() {
    let decoder = Decoder::new(Types::new::<&str>(&[]).unwrap());
    let ex = examples();
    assert_eq!(ex.len(), 6, "{ex:?}");
    for (topic, payload) in &ex {
        match decoder.decode(topic.as_bytes(), payload.as_bytes()) {
            Ok(Message::Event(e)) => {
                let txid = topic.split_once('-').unwrap().1;
                assert_eq!(e.txid.to_string(), txid);
                assert!(
                    e.ts >= e.txid.created_ms() as i64,
                    "{topic}: ts before creation"
                );
            }
            Ok(Message::Tick(t)) => assert_eq!(t.publisher, "bidder-eu1"),
            other => panic!("{topic}: {other:?}"),
        }
    }
    // The creation time the page states is the one in the txid.
    let bid = Txid::parse(&ex[1].0[4..]).unwrap();
    assert_eq!(bid.created_ms(), 1_795_548_000_000);
}
