//! Inline SVG charts for the report page: lines over a shared x axis,
//! histograms with marks, and labelled bars. Hand-written (a hundred lines)
//! rather than a plotting crate: the page must be self-contained, and the
//! charts need nothing a crate would add but its dependencies.

use std::fmt::Write as _;

const W: f64 = 560.0;
const H: f64 = 260.0;
const L: f64 = 64.0; // left margin (tick labels)
const B: f64 = 40.0; // bottom margin
const T: f64 = 28.0; // top margin (title)
const R: f64 = 12.0;

/// One line.
pub struct Series<'a> {
    /// Its legend.
    pub name: &'a str,
    /// CSS colour.
    pub color: &'a str,
    /// Points in data coordinates.
    pub points: Vec<(f64, f64)>,
    /// Dashed, and dots on each point.
    pub dashed: bool,
    /// Dots on each point.
    pub dots: bool,
}

/// Escapes text for SVG and HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An axis over the values, on round numbers (4 steps of 1, 2, 2.5 or 5 × 10^k).
fn range(vals: impl Iterator<Item = f64>, zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-12 {
        hi = lo + 1.0;
    }
    let raw = (hi - lo) / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| (hi / s).ceil() - (lo / s).floor() <= 5.0)
        .unwrap_or(10.0 * mag);
    ((lo / step).floor() * step, (hi / step).ceil() * step)
}

/// The round steps `range` chose: 3 to 5 of them.
fn ticks((lo, hi): (f64, f64)) -> Vec<f64> {
    let mag = 10f64.powf(((hi - lo) / 5.0).log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| ((hi - lo) / s).round() <= 5.0)
        .unwrap_or(10.0 * mag);
    let n = ((hi - lo) / step).round() as i64;
    (0..=n).map(|k| lo + k as f64 * step).collect()
}

fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else if a >= 0.01 {
        format!("{}", (v * 1000.0).round() / 1000.0)
    } else {
        format!("{v:.4}")
    }
}

/// A frame with axes, ticks and a title; returns the SVG so far and the
/// mapping from data to pixels.
fn frame(
    title: &str,
    xl: &str,
    yl: &str,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> (String, impl Fn(f64, f64) -> (f64, f64)) {
    let map = move |x: f64, y: f64| {
        (
            L + (x - x0) / (x1 - x0) * (W - L - R),
            H - B - (y - y0) / (y1 - y0) * (H - B - T),
        )
    };
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" font-family="sans-serif" font-size="11"><title>{t}</title><text x="{L}" y="16" font-size="13" font-weight="bold">{t}</text>"#,
        t = esc(title)
    );
    for y in ticks((y0, y1)) {
        let (_, py) = map(x0, y);
        let _ = write!(
            s,
            r##"<line x1="{L}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - R,
            L - 4.0,
            py + 4.0,
            fmt_tick(y),
        );
    }
    for x in ticks((x0, x1)) {
        let (px, _) = map(x, y0);
        let _ = write!(
            s,
            r#"<text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
            H - B + 14.0,
            fmt_tick(x),
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{L}" x2="{L}" y1="{T}" y2="{}" stroke="#888"/><line x1="{L}" x2="{}" y1="{y}" y2="{y}" stroke="#888"/><text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(12 {}) rotate(-90)" text-anchor="middle">{}</text>"##,
        H - B,
        W - R,
        (L + W - R) / 2.0,
        H - 6.0,
        esc(xl),
        (T + H - B) / 2.0,
        esc(yl),
        y = H - B,
    );
    (s, map)
}

fn legend(s: &mut String, items: &[(&str, &str)]) {
    let (mut x, mut y) = (L + 8.0, T + 2.0);
    for (name, color) in items {
        let width = 24.0 + 6.5 * name.len() as f64;
        if x + width > W - R && x > L + 8.0 {
            (x, y) = (L + 8.0, y + 14.0);
        }
        let _ = write!(
            s,
            r#"<rect x="{x:.0}" y="{y}" width="10" height="10" fill="{color}"/><text x="{:.0}" y="{}">{}</text>"#,
            x + 14.0,
            y + 9.0,
            esc(name)
        );
        x += width;
    }
}

/// Lines over a shared x axis; `marks` are vertical lines with labels.
pub fn lines(title: &str, xl: &str, yl: &str, series: &[Series], zero: bool) -> String {
    let xr = range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        false,
    );
    let yr = range(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        zero,
    );
    let (mut s, map) = frame(title, xl, yl, xr, yr);
    for se in series {
        let pts: Vec<String> = se
            .points
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|(x, y)| {
                let (px, py) = map(*x, *y);
                format!("{px:.1},{py:.1}")
            })
            .collect();
        let dash = if se.dashed {
            r#" stroke-dasharray="5 4""#
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.8"{dash} points="{}"/>"#,
            se.color,
            pts.join(" ")
        );
        if se.dots {
            for p in &pts {
                let (x, y) = p.split_once(',').expect("x,y");
                let _ = write!(
                    s,
                    r#"<circle cx="{x}" cy="{y}" r="3" fill="{}"/>"#,
                    se.color
                );
            }
        }
    }
    let items: Vec<(&str, &str)> = series.iter().map(|s| (s.name, s.color)).collect();
    legend(&mut s, &items);
    s.push_str("</svg>");
    s
}

/// A histogram: `bins` of (from, to, count), with labelled vertical marks.
pub fn histogram(
    title: &str,
    xl: &str,
    bins: &[(f64, f64, f64)],
    color: &str,
    marks: &[(f64, &str)],
) -> String {
    let xr = range(
        bins.iter()
            .flat_map(|b| [b.0, b.1])
            .chain(marks.iter().map(|m| m.0)),
        true,
    );
    let yr = range(bins.iter().map(|b| b.2), true);
    let (mut s, map) = frame(title, xl, "transactions", xr, yr);
    for (a, b, n) in bins {
        let (x0, y0) = map(*a, *n);
        let (x1, y1) = map(*b, 0.0);
        let _ = write!(
            s,
            r#"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
            (x1 - x0 - 0.5).max(0.5),
            y1 - y0
        );
    }
    for (x, label) in marks {
        let (px, _) = map(*x, 0.0);
        let _ = write!(
            s,
            r##"<line x1="{px:.1}" x2="{px:.1}" y1="{T}" y2="{}" stroke="#c0392b" stroke-dasharray="4 3"/><text x="{:.1}" y="{}" fill="#c0392b">{}</text>"##,
            H - B,
            px + 3.0,
            T + 24.0,
            esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

/// Horizontal bars, one per (label, value, colour), values written beside.
pub fn bars(title: &str, xl: &str, items: &[(&str, f64, &str)]) -> String {
    let x0 = items.iter().map(|i| i.1).fold(0.0, f64::min);
    let hi = items.iter().map(|i| i.1).fold(0.0, f64::max);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" font-family="sans-serif" font-size="11"><title>{t}</title><text x="8" y="16" font-size="13" font-weight="bold">{t}</text><text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        W / 2.0,
        H - 6.0,
        esc(xl),
        t = esc(title)
    );
    let row = (H - T - B) / items.len().max(1) as f64;
    let left = 190.0;
    let scale = (W - left - 90.0) / (hi - x0).max(1e-12);
    let zero = left - x0 * scale;
    for (i, (label, v, color)) in items.iter().enumerate() {
        let y = T + row * i as f64 + 4.0;
        let (a, b) = (zero.min(zero + v * scale), zero.max(zero + v * scale));
        let _ = write!(
            s,
            r#"<text x="{:.0}" y="{:.1}" text-anchor="end">{}</text><rect x="{a:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}">{v:.3}</text>"#,
            left - 6.0,
            y + row * 0.45,
            esc(label),
            (b - a).max(1.0),
            row * 0.7,
            b + 4.0,
            y + row * 0.45,
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{zero:.1}" x2="{zero:.1}" y1="{T}" y2="{}" stroke="#888"/>"##,
        H - B
    );
    s.push_str("</svg>");
    s
}
