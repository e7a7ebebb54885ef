//! Fuzzes the message decoder: any frames must decode or be rejected, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark_wire::{Decoder, Message, Types};

fuzz_target!(|data: &[u8]| {
    // First byte: how many frames; then frames split at 0xff bytes.
    let Some((&n, rest)) = data.split_first() else { return };
    let frames: Vec<&[u8]> = rest.splitn(usize::from(n % 4) + 1, |&b| b == 0xff).collect();
    let decoder = Decoder::new(Types::new(&["open"]).unwrap());
    if let Ok(Message::Event(e)) = decoder.decode_frames(&frames) {
        // What is accepted keeps its contract.
        assert_eq!(e.txid.as_str().len(), 32);
        assert!(e.ts >= 0);
        if let Some(f) = e.features {
            assert!(f.json.starts_with('{'));
        }
    }
});
