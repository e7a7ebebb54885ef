//! Fuzzes the message decoder: any frames must decode or be rejected, never
//! panic (the contract is `tidemark_wire::fuzz::check`, which a test also
//! runs over a million mutated messages on every build).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark_wire::{Decoder, Types};

fuzz_target!(|data: &[u8]| {
    let decoder = Decoder::new(Types::new(&["open"]).unwrap());
    tidemark_wire::fuzz::check(&decoder, data);
});
