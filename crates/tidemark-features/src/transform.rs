//! What a numeric feature becomes before it is hashed (SPEC 10, v1.2).
//!
//! A linear model extrapolates a raw count linearly: a person with 40 clicks
//! would weigh forty times one with a single click. A transform named for a
//! feature reshapes its value, and the checkpoint records it so every reader
//! scores what was trained. Values are computed in binary64 and rounded to
//! binary32 once, as the hashed value `x`.

use std::fmt;

/// A numeric feature's transform, written in configurations as `log1p`,
/// `clip(MIN, MAX)` or `buckets(B1, B2, ...)`.
#[derive(Debug, Clone, PartialEq)]
pub enum Transform {
    /// `x ↦ sign(x) · ln(1 + |x|)`: counts and amounts grow by orders of magnitude.
    Log1p,
    /// `x ↦ min(max(x, min), max)`.
    Clip {
        /// The lower bound.
        min: f64,
        /// The upper bound.
        max: f64,
    },
    /// `x ↦` the categorical value `i` (its decimal digits), where `i` is how
    /// many of the ascending bounds are `≤ x`: a step a linear model can
    /// weigh freely per bucket.
    Buckets(Vec<f64>),
}

/// A transformed value: still numeric, or a bucket's label.
#[derive(Debug, Clone, PartialEq)]
pub enum Shaped {
    /// The numeric feature with this value (binary64: the caller checks its
    /// range before rounding it to the hashed binary32 `x`).
    Number(f64),
    /// The categorical feature with these bytes.
    Bucket(String),
}

impl Transform {
    /// Parses `log1p`, `clip(MIN, MAX)` or `buckets(B1, ...)`.
    pub fn parse(text: &str) -> Result<Transform, String> {
        let t = text.trim();
        if t == "log1p" {
            return Ok(Transform::Log1p);
        }
        let (kind, args) = t
            .strip_suffix(')')
            .and_then(|t| t.split_once('('))
            .ok_or_else(|| {
                format!("{text:?}: expected log1p, clip(MIN, MAX) or buckets(B1, B2, ...)")
            })?;
        let nums = args
            .split(',')
            .map(|a| {
                let a = a.trim();
                match a.parse::<f64>() {
                    Ok(x) if x.is_finite() => Ok(x),
                    _ => Err(format!("{text:?}: {a:?} is not a finite number")),
                }
            })
            .collect::<Result<Vec<f64>, String>>()?;
        match kind.trim() {
            "clip" => match nums[..] {
                [min, max] if min <= max => Ok(Transform::Clip { min, max }),
                [_, _] => Err(format!("{text:?}: MIN must not exceed MAX")),
                _ => Err(format!("{text:?}: clip takes two numbers, MIN and MAX")),
            },
            "buckets" => {
                if !nums.windows(2).all(|w| w[0] < w[1]) {
                    return Err(format!(
                        "{text:?}: bucket bounds must be strictly ascending"
                    ));
                }
                Ok(Transform::Buckets(nums))
            }
            other => Err(format!(
                "{text:?}: unknown transform {other:?} (log1p, clip, buckets)"
            )),
        }
    }

    /// Applies the transform to `x`.
    pub fn apply(&self, x: f64) -> Shaped {
        match self {
            Transform::Log1p => Shaped::Number(x.signum() * x.abs().ln_1p()),
            Transform::Clip { min, max } => Shaped::Number(x.clamp(*min, *max)),
            Transform::Buckets(bounds) => {
                Shaped::Bucket(bounds.partition_point(|b| *b <= x).to_string())
            }
        }
    }

    /// The checkpoint's JSON for this transform.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Transform::Log1p => serde_json::json!({"kind": "log1p"}),
            Transform::Clip { min, max } => {
                serde_json::json!({"kind": "clip", "min": min, "max": max})
            }
            Transform::Buckets(b) => serde_json::json!({"kind": "buckets", "bounds": b}),
        }
    }

    /// Reads [`Transform::to_json`]'s form back.
    pub fn from_json(v: &serde_json::Value) -> Option<Transform> {
        let num = |k: &str| v[k].as_f64();
        let t = match v["kind"].as_str()? {
            "log1p" => Transform::Log1p,
            "clip" => Transform::Clip {
                min: num("min")?,
                max: num("max")?,
            },
            "buckets" => Transform::Buckets(
                v["bounds"]
                    .as_array()?
                    .iter()
                    .map(|b| b.as_f64())
                    .collect::<Option<Vec<f64>>>()?,
            ),
            _ => return None,
        };
        // The same checks as the configuration's, through its text form.
        Transform::parse(&t.to_string()).ok()
    }
}

impl fmt::Display for Transform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transform::Log1p => write!(f, "log1p"),
            Transform::Clip { min, max } => write!(f, "clip({min:?}, {max:?})"),
            Transform::Buckets(b) => {
                let parts: Vec<String> = b.iter().map(|x| format!("{x:?}")).collect();
                write!(f, "buckets({})", parts.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_back() {
        for text in ["log1p", "clip(0.0, 10.0)", "buckets(1.0, 2.0, 5.0)"] {
            let t = Transform::parse(text).unwrap();
            assert_eq!(t.to_string(), text);
            assert_eq!(Transform::from_json(&t.to_json()), Some(t));
        }
        assert_eq!(
            Transform::parse(" clip( -1 , 3 ) ").unwrap(),
            Transform::Clip {
                min: -1.0,
                max: 3.0
            }
        );
    }

    #[test]
    fn refuses_what_it_cannot_apply() {
        for bad in [
            "log2",
            "clip(1)",
            "clip(3, 1)",
            "clip(0, inf)",
            "buckets(2, 1)",
            "buckets(1, 1)",
            "buckets(x)",
            "buckets()",
            "sqrt(2)",
        ] {
            assert!(Transform::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn values() {
        let n = |t: &Transform, x: f64| t.apply(x);
        assert_eq!(n(&Transform::Log1p, 0.0), Shaped::Number(0.0));
        assert_eq!(n(&Transform::Log1p, 3.0), Shaped::Number(4f64.ln()));
        assert_eq!(n(&Transform::Log1p, -3.0), Shaped::Number(-(4f64.ln())));
        let clip = Transform::Clip { min: 0.0, max: 2.0 };
        assert_eq!(n(&clip, 5.0), Shaped::Number(2.0));
        assert_eq!(n(&clip, -5.0), Shaped::Number(0.0));
        let b = Transform::Buckets(vec![1.0, 2.0, 5.0]);
        let label = |x| match n(&b, x) {
            Shaped::Bucket(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            [label(0.5), label(1.0), label(4.9), label(5.0), label(99.0)],
            ["0", "1", "2", "3", "3"].map(String::from)
        );
    }
}
