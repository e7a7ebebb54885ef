//! The checkpoint scorer behind a C ABI, for bidders that are not written in
//! Rust (Go through cgo, Java through JNA or the FFM API, Python through
//! ctypes, C and C++ directly). `include/tidemark.h` declares it;
//! `examples/score.py` calls it; the golden fixtures under
//! `tests/fixtures/` score identically through Rust, this ABI and Python.
//!
//! Owns: the `extern "C"` surface only. Loading, scoring and atomic reloads
//! are `tidemark_checkpoint::Scorer`'s: this crate converts pointers,
//! strings and errors. A scorer may be shared between threads: scoring
//! takes a snapshot of the current model, and `tidemark_reload` swaps a new
//! one in while other threads go on scoring.

// The one crate with unsafe code: a C ABI takes raw pointers. Every pointer
// is checked for NULL; buffers are written within the lengths given.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr};
use std::path::Path;

use serde_json::{Map, Value};
use tidemark_checkpoint::Scorer;

/// An opaque scorer (`tidemark_scorer *` in C).
pub struct TidemarkScorer(Scorer);

/// Runs `f`, turning a panic into `on_panic` and a message in `err`: no
/// panic may unwind into a C caller (undefined behaviour, in practice an
/// abort of the bidder).
unsafe fn guarded<T>(err: *mut c_char, err_len: usize, on_panic: T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_err(
                err,
                err_len,
                &format!("internal error (a panic, caught): {why}"),
            );
            on_panic
        }
    }
}

/// Debug builds only: panics when `TIDEMARK_FAULT=cabi_panic` and the bid
/// carries a `"fault"` key, so a test can check the panic is caught.
fn fault(features_json: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("TIDEMARK_FAULT").as_deref() == Ok("cabi_panic")
        && features_json.contains("\"fault\"")
    {
        panic!("fault injected: cabi_panic");
    }
    #[cfg(not(debug_assertions))]
    let _ = features_json;
}

/// Copies `msg` into `err` (NUL-terminated, truncated to `len`) if given.
unsafe fn set_err(err: *mut c_char, len: usize, msg: &str) {
    if err.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    std::ptr::copy_nonoverlapping(msg.as_ptr(), err.cast::<u8>(), n);
    *err.add(n) = 0;
}

unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    CStr::from_ptr(p)
        .to_str()
        .map_err(|_| format!("{what} is not UTF-8"))
}

fn features(json: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("expected a JSON object of features".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// Loads a checkpoint file, or a directory's `latest.tdm`. Returns NULL on
/// failure, with the reason in `err`.
///
/// # Safety
/// `path` is a NUL-terminated string; `err` is NULL or holds `err_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tidemark_open(
    path: *const c_char,
    err: *mut c_char,
    err_len: usize,
) -> *mut TidemarkScorer {
    guarded(err, err_len, std::ptr::null_mut(), || {
        let opened = text(path, "path")
            .and_then(|p| Scorer::open(Path::new(p)).map_err(|e| format!("{p}: {e}")));
        match opened {
            Ok(s) => Box::into_raw(Box::new(TidemarkScorer(s))),
            Err(e) => {
                set_err(err, err_len, &e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Reads the checkpoint again (a directory: its newest `latest.tdm`) and
/// swaps it in atomically; other threads score with the old model until
/// then. Returns 0, or -1 with the reason in `err` (the old model stays).
///
/// # Safety
/// `s` comes from `tidemark_open`; `err` is NULL or holds `err_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tidemark_reload(
    s: *const TidemarkScorer,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    guarded(err, err_len, -1, || {
        let Some(s) = s.as_ref() else {
            set_err(err, err_len, "scorer is NULL");
            return -1;
        };
        match s.0.reload() {
            Ok(_) => 0,
            Err(e) => {
                set_err(err, err_len, &e.to_string());
                -1
            }
        }
    })
}

/// Scores one bid, a JSON object of features (strings, numbers, bools),
/// writing into `out[i]` the probability of `names[i]`: a target of the
/// checkpoint or `p_install` (`ctr × (cvr_short + cvr_long)`); NaN for a name
/// the checkpoint lacks. Returns 0, or -1 with the reason in `err`.
///
/// # Safety
/// `features_json` is a NUL-terminated string; `names` holds `n` of them;
/// `out` holds `n` doubles; `err` is NULL or holds `err_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tidemark_score(
    s: *const TidemarkScorer,
    features_json: *const c_char,
    names: *const *const c_char,
    n: usize,
    out: *mut f64,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    let run = || -> Result<(), String> {
        let s = s.as_ref().ok_or("scorer is NULL")?;
        if n > 0 && (names.is_null() || out.is_null()) {
            return Err("names or out is NULL".into());
        }
        let bid = text(features_json, "features_json")?;
        fault(bid);
        let scores = s.0.score(&features(bid)?);
        for i in 0..n {
            let name = text(*names.add(i), "a name")?;
            let p = match name {
                "p_install" => scores.p_install,
                t => scores.get(t),
            };
            *out.add(i) = p.unwrap_or(f64::NAN);
        }
        Ok(())
    };
    guarded(err, err_len, -1, || match run() {
        Ok(()) => 0,
        Err(e) => {
            set_err(err, err_len, &e);
            -1
        }
    })
}

/// Scores one bid as `tidemark score` does, writing its answer, a JSON
/// object of every target's probability and `p_install`, NUL-terminated,
/// into `out`. Returns the answer's length, or -1 with the reason in `err`
/// (a malformed bid; `out` too small, saying the length needed).
///
/// # Safety
/// `features_json` is a NUL-terminated string; `out` holds `out_len` bytes;
/// `err` is NULL or holds `err_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tidemark_score_json(
    s: *const TidemarkScorer,
    features_json: *const c_char,
    out: *mut c_char,
    out_len: usize,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    let run = || -> Result<c_int, String> {
        let s = s.as_ref().ok_or("scorer is NULL")?;
        let bid = text(features_json, "features_json")?;
        fault(bid);
        let answer = s.0.score(&features(bid)?).to_json().to_string();
        if out.is_null() || answer.len() >= out_len {
            return Err(format!(
                "out holds {out_len} bytes, the answer needs {}",
                answer.len() + 1
            ));
        }
        std::ptr::copy_nonoverlapping(answer.as_ptr(), out.cast::<u8>(), answer.len());
        *out.add(answer.len()) = 0;
        c_int::try_from(answer.len()).map_err(|_| "answer too long".to_string())
    };
    guarded(err, err_len, -1, || {
        run().unwrap_or_else(|e| {
            set_err(err, err_len, &e);
            -1
        })
    })
}

/// When the current model's checkpoint was written, ms since the epoch (a
/// bidder alerts on a stale model); -1 for a NULL scorer.
///
/// # Safety
/// `s` is NULL or comes from `tidemark_open`.
#[no_mangle]
pub unsafe extern "C" fn tidemark_created_at_ms(s: *const TidemarkScorer) -> i64 {
    guarded(std::ptr::null_mut(), 0, -1, || {
        s.as_ref().map_or(-1, |s| s.0.model().created_at_ms)
    })
}

/// Frees a scorer (NULL is ignored).
///
/// # Safety
/// `s` is NULL or comes from `tidemark_open`, and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn tidemark_free(s: *mut TidemarkScorer) {
    if !s.is_null() {
        drop(Box::from_raw(s));
    }
}
