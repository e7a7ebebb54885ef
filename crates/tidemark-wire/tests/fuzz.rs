//! The fuzz target's contract (`tidemark_wire::fuzz::check`) over a million
//! inputs on every build: valid messages of every shape, mutated (bytes
//! flipped, inserted, deleted, repeated, spliced with another message,
//! truncated, frames split differently). Not coverage-guided like `just
//! fuzz`, but it runs in CI and fails on the first panic.

use std::collections::BTreeMap;

use tidemark_wire::{Decoder, Message, Types};

const TX: &str = "3fa9c0ffee0011223344018bcfe5687b";

fn seeds() -> Vec<Vec<u8>> {
    let frame = |topic: &str, payload: &str| {
        let mut v = vec![1u8];
        v.extend_from_slice(topic.as_bytes());
        v.push(0xff);
        v.extend_from_slice(payload.as_bytes());
        v
    };
    vec![
        frame(
            &format!("bid-{TX}"),
            &format!(
                r#"{{"type":"bid","txid":"{TX}","ts":1700000000200,"features":{{"app":"x","n":3,"ok":true}},"price":1.5,"user":"u1"}}"#
            ),
        ),
        frame(
            &format!("click-{TX}"),
            &format!(r#"{{"type":"click","txid":"{TX}","ts":1700000000900}}"#),
        ),
        frame(
            &format!("impression-{TX}"),
            &format!(
                r#"{{"type":"impression","txid":"{TX}","ts":17,"user":"u\u00e9","ids":{{"device":"d1","email":"e"}}}}"#
            ),
        ),
        frame(
            &format!("open-{TX}"),
            &format!(r#"{{"type":"open","txid":"{TX}","ts":1}}"#),
        ),
        frame(
            "tick",
            r#"{"type":"tick","publisher":"p1","ts":1700000001000,"sent":{"bid-3":12,"click-3":1}}"#,
        ),
    ]
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[u8] = b"\"{}[]:,\\\x00\xff-0123456789eE.+ \x7f\xc3\xa9";

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&seeds[rng.below(seeds.len())]);
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(8) {
            0 if at < out.len() => out[at] ^= 1 << rng.below(8),
            1 => out.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            2 if at < out.len() => {
                out.remove(at);
            }
            3 if at < out.len() => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                let span = out[at..end].to_vec();
                out.splice(at..at, span);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                out.truncate(at);
                out.extend_from_slice(&other[from..]);
            }
            5 => out.truncate(at),
            6 if !out.is_empty() => out[0] = rng.next() as u8,
            _ if at < out.len() => out[at] = INTERESTING[rng.below(INTERESTING.len())],
            _ => {}
        }
    }
}

#[test]
fn a_million_mutated_messages_decode_or_are_refused_never_panic() {
    let decoder = Decoder::new(Types::new(&["open"]).unwrap());
    let seeds = seeds();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut input = Vec::new();
    let (mut events, mut ticks) = (0, 0);
    let mut refused: BTreeMap<&'static str, u64> = BTreeMap::new();
    for _ in 0..1_000_000 {
        mutate(&mut rng, &seeds, &mut input);
        tidemark_wire::fuzz::check(&decoder, &input);
        // Tally what became of it, so a broken mutator cannot pass unseen.
        let Some((&n, rest)) = input.split_first() else {
            continue;
        };
        let frames: Vec<&[u8]> = rest
            .splitn(usize::from(n % 4) + 1, |&b| b == 0xff)
            .collect();
        match decoder.decode_frames(&frames) {
            Ok(Message::Event(_)) => events += 1,
            Ok(Message::Tick(_)) => ticks += 1,
            Err(r) => *refused.entry(r.reason()).or_default() += 1,
        }
    }
    eprintln!("events {events}, ticks {ticks}, refused {refused:?}");
    assert!(
        events > 20_000 && ticks > 10_000,
        "mutations keep some valid"
    );
    assert!(
        refused.len() >= 8,
        "many kinds of refusal reached: {refused:?}"
    );
}
