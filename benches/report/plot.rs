//! A small hand-written SVG: hand-off latency percentiles per implementation, log scale.

use std::fmt::Write;
use std::time::Duration;

use crate::stats::percentile;

const PERCENTILES: [f64; 9] = [0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 0.995, 0.999];
const COLORS: [&str; 4] = ["#1b7837", "#d95f02", "#7570b3", "#e7298a"];

/// One line per series: (label, samples).
pub fn handoff_svg(series: &[(&str, &[Duration])], ping: Duration) -> String {
    let (w, h) = (800.0, 420.0);
    let (left, right, top, bottom) = (70.0, 250.0, 40.0, 60.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let points: Vec<(&str, Vec<f64>)> = series
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(name, samples)| {
            let mut v = samples.to_vec();
            (
                *name,
                PERCENTILES
                    .iter()
                    .map(|&p| percentile(&mut v, p).as_secs_f64() * 1e6)
                    .collect(),
            )
        })
        .collect();
    let max = points
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .fold(1.0f64, f64::max);
    let min = points
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .fold(max, f64::min)
        .max(1.0);
    let (lo, hi) = (
        min.log10().floor(),
        max.log10().ceil().max(min.log10().floor() + 1.0),
    );
    let y = |us: f64| top + plot_h * (1.0 - (us.max(1.0).log10() - lo) / (hi - lo));
    let x = |i: usize| left + plot_w * i as f64 / (PERCENTILES.len() - 1) as f64;

    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = write!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">Hand-off latency: release start to next holder (16 threads, 4 clients, 1 lock)</text>"#,
        w / 2.0
    );
    for decade in (lo as i32)..=(hi as i32) {
        let us = 10f64.powi(decade);
        let yy = y(us);
        let label = if us >= 1000.0 {
            format!("{} ms", us / 1000.0)
        } else {
            format!("{us} µs")
        };
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{yy}" y2="{yy}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{label}</text>"##,
            left + plot_w,
            left - 6.0,
            yy + 4.0
        );
    }
    let ping_us = ping.as_secs_f64() * 1e6;
    let (py, right_edge) = (y(ping_us), left + plot_w);
    let _ = write!(
        svg,
        r##"<line x1="{left}" x2="{right_edge}" y1="{py}" y2="{py}" stroke="#999" stroke-dasharray="4 3"/><text x="{}" y="{}" fill="#666">PING</text>"##,
        right_edge + 6.0,
        py + 4.0
    );
    for (i, p) in PERCENTILES.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">p{}</text>"#,
            x(i),
            top + plot_h + 20.0,
            format_percentile(*p)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">percentile</text>"#,
        left + plot_w / 2.0,
        h - 15.0
    );
    for (k, (name, values)) in points.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let path: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (i, v) in values.iter().enumerate() {
            let _ = write!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                x(i),
                y(*v)
            );
        }
        let ly = top + 20.0 + 20.0 * k as f64;
        let _ = write!(
            svg,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{name}</text>"#,
            left + plot_w + 40.0,
            left + plot_w + 60.0,
            left + plot_w + 66.0,
            ly + 4.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn format_percentile(p: f64) -> String {
    let s = format!("{}", p * 100.0);
    if s.contains('.') {
        s.trim_end_matches('0').to_string()
    } else {
        s
    }
}
