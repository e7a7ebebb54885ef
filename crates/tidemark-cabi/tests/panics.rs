//! No panic unwinds into a C caller: a panic inside a call is caught, the
//! call returns -1 with the reason, and the scorer goes on serving. A test
//! binary of its own, since it sets `TIDEMARK_FAULT` (debug builds only).

#![allow(unsafe_code)]

use std::ffi::{c_char, CStr, CString};
use std::path::Path;

use tidemark_cabi::*;

#[test]
#[cfg(debug_assertions)]
fn a_panic_inside_a_call_is_an_error_not_an_abort() {
    std::env::set_var("TIDEMARK_FAULT", "cabi_panic");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/golden.tdm");
    let path = CString::new(golden.to_str().unwrap()).unwrap();
    let mut err = [0 as c_char; 256];
    let s = unsafe { tidemark_open(path.as_ptr(), err.as_mut_ptr(), err.len()) };
    assert!(!s.is_null());
    let name = CString::new("ctr").unwrap();
    let names = [name.as_ptr()];
    let score = |bid: &str, err: &mut [c_char; 256]| {
        let bid = CString::new(bid).unwrap();
        let mut out = [0f64; 1];
        let rc = unsafe {
            tidemark_score(
                s,
                bid.as_ptr(),
                names.as_ptr(),
                1,
                out.as_mut_ptr(),
                err.as_mut_ptr(),
                err.len(),
            )
        };
        (rc, out[0])
    };
    let (rc, _) = score(r#"{"app":"app1","fault":1}"#, &mut err);
    assert_eq!(rc, -1);
    let said = unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert!(said.contains("panic"), "{said}");
    let mut out = [0 as c_char; 512];
    let bid = CString::new(r#"{"fault":2}"#).unwrap();
    let n = unsafe {
        tidemark_score_json(
            s,
            bid.as_ptr(),
            out.as_mut_ptr(),
            out.len(),
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(n, -1);
    // The scorer serves on.
    let (rc, p) = score(r#"{"app":"app1"}"#, &mut err);
    assert_eq!(rc, 0);
    assert!(p > 0.0 && p < 1.0);
    unsafe { tidemark_free(s) };
}
