//! The decoder's fuzz contract, shared by the libFuzzer target
//! (`fuzz/fuzz_targets/decode.rs`, coverage-guided, `just fuzz`) and by a
//! test that runs it on every build over a million mutated messages.

use crate::{Decoder, Message};

/// One fuzz input: the first byte says how many frames (0–3 splits), the
/// rest is split into frames at `0xff` bytes. Whatever it is, the decoder
/// must accept or refuse it without panicking, and what it accepts keeps
/// its contract (a 32-digit txid, a non-negative `ts`, features an object).
pub fn check(decoder: &Decoder, data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let frames: Vec<&[u8]> = rest
        .splitn(usize::from(n % 4) + 1, |&b| b == 0xff)
        .collect();
    if let Ok(Message::Event(e)) = decoder.decode_frames(&frames) {
        assert_eq!(e.txid.as_str().len(), 32);
        assert!(e.ts >= 0);
        if let Some(f) = e.features {
            assert!(f.json.starts_with('{'));
        }
    }
}
