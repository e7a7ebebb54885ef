//! Feature hashing (SPEC 10), shared by training and serving so a bidder
//! scores exactly what was trained. `docs/checkpoint-format.md` specifies the
//! same bytes for implementations in other languages.
//!
//! Owns: MurmurHash3 (x86, 32-bit) and the mapping from a bid's features to
//! sparse `(index, value)` pairs. Knows nothing of models, files or IO.
//!
//! With `mask = 2^bits - 1` and `h(bytes, seed)` = MurmurHash3_x86_32:
//! - a string `s` under name `n`: index `h(s, h(n, seed)) & mask`, value 1;
//! - a bool: as the string `"true"` or `"false"`;
//! - a number `x` under name `n`: index `h(n, seed) & mask`, value `x`;
//! - a cross of names `a` and `b` (both present): index
//!   `h(vb, h(va, h(a ++ 0x1F ++ b, seed))) & mask`, where a string's bytes are
//!   its value's, a bool's `"true"`/`"false"`, a number's empty, and the value is
//!   the product of the numbers (1 for strings and bools);
//! - the bias: index `2^bits` (one past the hashed slots), value 1.
//!
//! A number under a name with a [`Transform`] is first transformed: its
//! value replaced (`log1p`, `clip`), or made the categorical bucket label
//! (`buckets`), everywhere above, crosses included.
//!
//! A target may leave features out of its rows ([`Hashing::omit`]): for
//! that target they are hashed as if the bid did not carry them, crosses
//! with them included, in training and scoring alike.
//!
//! A number (after its transform) or a cross's product that is not finite
//! or exceeds [`MAX_ABS`] in magnitude is left out of the row (SPEC 10,
//! v1.3), in training and scoring alike: one absurd value in one bid must
//! not reach any model.

#![warn(missing_docs)]

mod transform;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
pub use transform::{Shaped, Transform};

/// The hashing settings a checkpoint records.
#[derive(Debug, Clone, PartialEq)]
pub struct Hashing {
    /// Values beyond this magnitude (or not finite) are left out of a row:
    /// [`MAX_ABS`], recorded in the checkpoint.
    pub max_abs: f64,
    /// Features hash into `2^bits` slots.
    pub bits: u8,
    /// The hash seed.
    pub seed: u32,
    /// Pairs of feature names crossed into one more feature each.
    pub crosses: Vec<(String, String)>,
    /// Numeric features' transforms, by feature name.
    pub transforms: BTreeMap<String, Transform>,
    /// Per target, the feature names its rows leave out (as if absent, so
    /// crosses with them are left out too). A target not named hashes
    /// every feature.
    pub omit: BTreeMap<String, BTreeSet<String>>,
}

/// A feature's value as hashing sees it.
#[derive(Debug, Clone, Copy)]
pub enum Val<'a> {
    /// A string's bytes, or a bool's `"true"`/`"false"`.
    Bytes(&'a [u8]),
    /// A number.
    Number(f64),
}

impl<'a> Val<'a> {
    /// The value of a JSON feature; arrays, objects and null have none.
    pub fn of_json(v: &'a Value) -> Option<Val<'a>> {
        match v {
            Value::String(s) => Some(Val::Bytes(s.as_bytes())),
            Value::Bool(b) => Some(Val::Bytes(bool_bytes(*b))),
            Value::Number(n) => n.as_f64().map(Val::Number),
            _ => None,
        }
    }
}

/// The largest magnitude a value entering a model may have (SPEC 10, v1.3):
/// a numeric feature after its transform, or a cross's product, that is not
/// finite or exceeds it is left out of the row. Within it every gradient,
/// its square and every learner state stays finite in binary32.
pub const MAX_ABS: f64 = 1e15;

/// A value after its transform: the bytes hashed under the name (none for
/// a number, whose index is its name's) and the value `x` in binary64,
/// before its range is checked and it is rounded to the hashed binary32.
#[inline]
pub fn shape<'a>(t: Option<&Transform>, v: Val<'a>) -> (Option<Cow<'a, [u8]>>, f64) {
    match (v, t) {
        (Val::Bytes(b), _) => (Some(Cow::Borrowed(b)), 1.0),
        (Val::Number(x), None) => (None, x),
        (Val::Number(x), Some(t)) => match t.apply(x) {
            Shaped::Number(y) => (None, y),
            Shaped::Bucket(label) => (Some(Cow::Owned(label.into_bytes())), 1.0),
        },
    }
}

/// A feature a row left out because its value was out of range: a name, or
/// the two names of a cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfRange<'a> {
    /// The numeric feature of this name.
    Feature(&'a str),
    /// The cross of these two names.
    Cross(&'a str, &'a str),
}

impl std::fmt::Display for OutOfRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutOfRange::Feature(n) => f.write_str(n),
            OutOfRange::Cross(a, b) => write!(f, "{a}*{b}"),
        }
    }
}

impl Hashing {
    /// Hashing into `2^bits` slots (1 to 30) with `seed` and crosses.
    pub fn new(bits: u8, seed: u32, crosses: Vec<(String, String)>) -> Hashing {
        assert!((1..=30).contains(&bits), "bits must be in 1..=30");
        Hashing {
            max_abs: MAX_ABS,
            bits,
            seed,
            crosses,
            transforms: BTreeMap::new(),
            omit: BTreeMap::new(),
        }
    }

    /// The same hashing with these targets leaving these features out
    /// (target → names; empty sets are dropped).
    pub fn with_omit(mut self, omit: BTreeMap<String, BTreeSet<String>>) -> Hashing {
        self.omit = omit.into_iter().filter(|(_, n)| !n.is_empty()).collect();
        self
    }

    /// The features `target`'s rows leave out, if any.
    #[inline]
    pub fn omitted(&self, target: &str) -> Option<&BTreeSet<String>> {
        if self.omit.is_empty() {
            None
        } else {
            self.omit.get(target)
        }
    }

    /// The same hashing with these numeric transforms.
    pub fn with_transforms(mut self, transforms: BTreeMap<String, Transform>) -> Hashing {
        self.transforms = transforms;
        self
    }

    /// The transform of the feature `name`, if one is configured.
    #[inline]
    pub fn transform(&self, name: &str) -> Option<&Transform> {
        if self.transforms.is_empty() {
            None
        } else {
            self.transforms.get(name)
        }
    }

    /// Whether `x` may enter a model: finite and within `max_abs`.
    #[inline]
    pub fn in_range(&self, x: f64) -> bool {
        x.abs() <= self.max_abs
    }

    /// Appends the feature `name` (whose seed is `name_seed`) with value `v`;
    /// `false` when it is left out because its value is out of range.
    #[inline]
    #[must_use]
    pub fn push(
        &self,
        name_seed: u32,
        t: Option<&Transform>,
        v: Val,
        out: &mut Vec<(u32, f32)>,
    ) -> bool {
        // The common cases first, without building a `shape`.
        match (v, t) {
            (Val::Bytes(b), _) => out.push((self.categorical(name_seed, b), 1.0)),
            (v, t) => match shape(t, v) {
                (Some(bytes), x) => out.push((self.categorical(name_seed, &bytes), x as f32)),
                (None, x) if self.in_range(x) => out.push((name_seed & self.mask(), x as f32)),
                (None, _) => return false,
            },
        }
        true
    }

    /// `2^bits - 1`: the hashed slots' mask.
    pub fn mask(&self) -> u32 {
        (1u32 << self.bits) - 1
    }

    /// Slots in a weight vector: the hashed ones plus the bias.
    pub fn slots(&self) -> usize {
        (1usize << self.bits) + 1
    }

    /// The bias's slot, one past the hashed ones.
    pub fn bias_index(&self) -> u32 {
        1u32 << self.bits
    }

    /// Appends the features of a JSON object, then the bias, to `out`.
    /// Values other than strings, numbers and bools are skipped, and numbers
    /// out of range left out ([`Hashing::hash_json_counted_for`] names
    /// them). Every feature is hashed: [`Hashing::hash_json_for`] hashes a
    /// target's row.
    pub fn hash_json(&self, features: &serde_json::Map<String, Value>, out: &mut Vec<(u32, f32)>) {
        self.hash_json_skipping(None, features, out, |_| {});
    }

    /// [`Hashing::hash_json`] as `target`'s row: without the features it
    /// omits.
    pub fn hash_json_for(
        &self,
        target: &str,
        features: &serde_json::Map<String, Value>,
        out: &mut Vec<(u32, f32)>,
    ) {
        self.hash_json_counted_for(target, features, out, |_| {});
    }

    /// [`Hashing::hash_json_for`], calling `left_out` for each feature or
    /// cross left out because its value is out of range.
    pub fn hash_json_counted_for(
        &self,
        target: &str,
        features: &serde_json::Map<String, Value>,
        out: &mut Vec<(u32, f32)>,
        left_out: impl FnMut(OutOfRange<'_>),
    ) {
        self.hash_json_skipping(self.omitted(target), features, out, left_out);
    }

    /// Hashes the features not in `skip`, and the crosses of two of them.
    fn hash_json_skipping(
        &self,
        skip: Option<&BTreeSet<String>>,
        features: &serde_json::Map<String, Value>,
        out: &mut Vec<(u32, f32)>,
        mut left_out: impl FnMut(OutOfRange<'_>),
    ) {
        let kept = |name: &str| skip.is_none_or(|s| !s.contains(name));
        for (name, v) in features {
            if !kept(name) {
                continue;
            }
            if let Some(v) = Val::of_json(v) {
                if !self.push(self.name_seed(name), self.transform(name), v, out) {
                    left_out(OutOfRange::Feature(name));
                }
            }
        }
        for (a, b) in &self.crosses {
            if !(kept(a) && kept(b)) {
                continue;
            }
            let (Some(va), Some(vb)) = (
                features.get(a).and_then(Val::of_json),
                features.get(b).and_then(Val::of_json),
            ) else {
                continue;
            };
            let seed = self.cross_seed(a, b);
            if !self.push_cross(seed, (self.transform(a), va), (self.transform(b), vb), out) {
                left_out(OutOfRange::Cross(a, b));
            }
        }
        out.push((self.bias_index(), 1.0));
    }

    /// Appends the cross (seed `cross_seed(a, b)`) of two present values,
    /// each with its feature's transform; `false` when it is left out
    /// because the product is out of range. The product is that of the two
    /// factors rounded to binary32, computed exactly (in binary64) and then
    /// rounded once: the binary32 product, and no overflow goes unseen.
    #[inline]
    #[must_use]
    pub fn push_cross(
        &self,
        cross_seed: u32,
        a: (Option<&Transform>, Val),
        b: (Option<&Transform>, Val),
        out: &mut Vec<(u32, f32)>,
    ) -> bool {
        let (ba, xa) = shape(a.0, a.1);
        let (bb, xb) = shape(b.0, b.1);
        let x = f64::from(xa as f32) * f64::from(xb as f32);
        if !self.in_range(x) {
            return false;
        }
        let (ba, bb) = (ba.unwrap_or_default(), bb.unwrap_or_default());
        out.push((self.cross(cross_seed, &ba, &bb), x as f32));
        true
    }

    /// The seed of a column or feature name: index of a categorical value `v`
    /// is `murmur3_32(v, name_seed(n)) & mask`.
    pub fn name_seed(&self, name: &str) -> u32 {
        murmur3_32(name.as_bytes(), self.seed)
    }

    /// The index of categorical value `v` under a name whose seed is `name_seed`.
    #[inline]
    pub fn categorical(&self, name_seed: u32, v: &[u8]) -> u32 {
        murmur3_32(v, name_seed) & self.mask()
    }

    /// The index of a cross of the bytes `a` and `b` under `cross_seed(..)`.
    #[inline]
    pub fn cross(&self, cross_seed: u32, a: &[u8], b: &[u8]) -> u32 {
        murmur3_32(b, murmur3_32(a, cross_seed)) & self.mask()
    }

    /// The seed of a cross of the names `a` and `b`.
    pub fn cross_seed(&self, a: &str, b: &str) -> u32 {
        let mut key = Vec::with_capacity(a.len() + b.len() + 1);
        key.extend_from_slice(a.as_bytes());
        key.push(0x1f);
        key.extend_from_slice(b.as_bytes());
        murmur3_32(&key, self.seed)
    }
}

/// The logistic function, the logit clamped to ±35: training, serving and
/// the synthetic market's truth all use this one.
#[inline]
pub fn sigmoid(s: f64) -> f64 {
    1.0 / (1.0 + (-s.clamp(-35.0, 35.0)).exp())
}

fn bool_bytes(b: bool) -> &'static [u8] {
    if b {
        b"true"
    } else {
        b"false"
    }
}

/// MurmurHash3, x86 32-bit variant (Austin Appleby), as in most languages'
/// libraries (`mmh3.hash(data, seed, signed=False)` in Python).
#[inline]
pub fn murmur3_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    let mut k = 0u32;
    for (i, b) in tail.iter().enumerate() {
        k |= u32::from(*b) << (8 * i);
    }
    if !tail.is_empty() {
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_reference_vectors() {
        // From the reference implementation's test suite and Python's mmh3.
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_32(b"", 0xffff_ffff), 0x81f1_6f39);
        assert_eq!(murmur3_32(b"\0\0\0\0", 0), 0x2362_f9de);
        assert_eq!(murmur3_32(b"aaaa", 0x9747_b28c), 0x5a97_808a);
        assert_eq!(murmur3_32(b"abc", 0), 0xb3dd_93fa);
        assert_eq!(murmur3_32(b"Hello, world!", 0x9747_b28c), 0x2488_4cba);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
    }

    #[test]
    fn features_by_kind() {
        let h = Hashing::new(10, 0, vec![("app".into(), "os".into())]);
        let f: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"app":"x","n":2.5,"ok":true,"skip":[1],"os":"ios"}"#).unwrap();
        let mut out = Vec::new();
        h.hash_json(&f, &mut out);
        let mask = h.mask();
        let app = murmur3_32(b"x", murmur3_32(b"app", 0)) & mask;
        let n = murmur3_32(b"n", 0) & mask;
        let ok = murmur3_32(b"true", murmur3_32(b"ok", 0)) & mask;
        let cross = murmur3_32(b"ios", murmur3_32(b"x", murmur3_32(b"app\x1fos", 0))) & mask;
        assert!(out.contains(&(app, 1.0)));
        assert!(out.contains(&(n, 2.5)));
        assert!(out.contains(&(ok, 1.0)));
        assert!(out.contains(&(cross, 1.0)));
        assert_eq!(
            out.last(),
            Some(&(1024, 1.0)),
            "bias last, one past the hashed slots"
        );
        assert_eq!(out.len(), 6, "the array value is skipped");
    }

    #[test]
    fn a_target_leaves_out_what_it_omits_crosses_included() {
        let omit = BTreeMap::from([
            ("cvr".to_string(), BTreeSet::from(["os".to_string()])),
            ("none".to_string(), BTreeSet::new()),
        ]);
        let h = Hashing::new(10, 0, vec![("app".into(), "os".into())]).with_omit(omit);
        assert!(!h.omit.contains_key("none"), "an empty list omits nothing");
        let f: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"app":"x","n":2.5,"os":"ios"}"#).unwrap();
        let (mut all, mut cvr, mut ctr) = (Vec::new(), Vec::new(), Vec::new());
        h.hash_json(&f, &mut all);
        h.hash_json_for("cvr", &f, &mut cvr);
        h.hash_json_for("ctr", &f, &mut ctr);
        assert_eq!(ctr, all, "a target not named hashes every feature");
        let mut without: serde_json::Map<String, Value> = f.clone();
        without.remove("os");
        let mut expected = Vec::new();
        h.hash_json(&without, &mut expected);
        assert_eq!(cvr, expected, "as if the bid had no os: its cross goes too");
        assert_eq!(all.len(), cvr.len() + 2);
    }

    #[test]
    fn transforms_apply_to_features_and_crosses() {
        let t = BTreeMap::from([
            ("n".to_string(), Transform::Log1p),
            ("k".to_string(), Transform::Buckets(vec![1.0, 10.0])),
        ]);
        let h = Hashing::new(10, 0, vec![("k".into(), "os".into())]).with_transforms(t);
        let f: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"n":3,"k":4,"os":"ios"}"#).unwrap();
        let mut out = Vec::new();
        h.hash_json(&f, &mut out);
        let mask = h.mask();
        let n = murmur3_32(b"n", 0) & mask;
        // 4 is past one bound of two: the bucket "1", a categorical value.
        let k = murmur3_32(b"1", murmur3_32(b"k", 0)) & mask;
        let cross = murmur3_32(b"ios", murmur3_32(b"1", murmur3_32(b"k\x1fos", 0))) & mask;
        assert_eq!(
            out,
            vec![
                (k, 1.0),
                (n, 4f64.ln() as f32),
                (murmur3_32(b"ios", murmur3_32(b"os", 0)) & mask, 1.0),
                (cross, 1.0),
                (1024, 1.0)
            ]
        );
    }
}
