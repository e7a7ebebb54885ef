//! Faults the tests inject into a real process, named in the environment
//! variable `TIDEMARK_FAULT`; compiled into debug builds only, so a
//! release binary has no such door.

/// Panics if `TIDEMARK_FAULT` names `fault` and `payload` carries a
/// `"fault"` key, so a test can send honest messages before the one that
/// breaks the thread (debug builds only).
#[inline]
pub fn inject(fault: &str, payload: &[u8]) {
    #[cfg(debug_assertions)]
    {
        use std::sync::OnceLock;
        static NAMED: OnceLock<Option<String>> = OnceLock::new();
        let named = NAMED.get_or_init(|| std::env::var("TIDEMARK_FAULT").ok());
        if named.as_deref() == Some(fault) && payload.windows(7).any(|w| w == b"\"fault\"") {
            panic!("fault injected: {fault}");
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = (fault, payload);
}
