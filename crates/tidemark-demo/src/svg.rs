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
    let pad = (hi - lo) * 0.05;
    (if zero && lo >= 0.0 { lo } else { lo - pad }, hi + pad)
}

fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
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
    for i in 0..=4 {
        let (fx, fy) = (f64::from(i) / 4.0, f64::from(i) / 4.0);
        let (px, _) = map(x0 + fx * (x1 - x0), y0);
        let (_, py) = map(x0, y0 + fy * (y1 - y0));
        let _ = write!(
            s,
            r##"<line x1="{L}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" text-anchor="end">{}</text><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            W - R,
            L - 4.0,
            py + 4.0,
            fmt_tick(y0 + fy * (y1 - y0)),
            H - B + 14.0,
            fmt_tick(x0 + fx * (x1 - x0)),
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
    let mut x = L + 8.0;
    for (name, color) in items {
        let _ = write!(
            s,
            r#"<rect x="{x:.0}" y="{}" width="10" height="10" fill="{color}"/><text x="{:.0}" y="{}">{}</text>"#,
            T + 2.0,
            x + 14.0,
            T + 11.0,
            esc(name)
        );
        x += 24.0 + 6.5 * name.len() as f64;
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
    for (i, (label, v, color)) in items.iter().enumerate() {
        let y = T + row * i as f64 + 4.0;
        let w = ((v - x0) / (hi - x0).max(1e-12) * (W - left - 90.0)).max(1.0);
        let _ = write!(
            s,
            r#"<text x="{:.0}" y="{:.1}" text-anchor="end">{}</text><rect x="{left}" y="{y:.1}" width="{w:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}">{v:.3}</text>"#,
            left - 6.0,
            y + row * 0.45,
            esc(label),
            row * 0.7,
            left + w + 4.0,
            y + row * 0.45,
        );
    }
    s.push_str("</svg>");
    s
}
