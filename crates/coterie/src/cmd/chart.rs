//! Line charts against N, as SVG: what `bench --svg` draws.

use std::fmt::Write;

use coterie_diagram::svg::PALETTE as COLOURS;

/// One line: a name for the legend, its points (N, value), and whether it
/// is drawn dashed (a second measure of the same algorithm, like p99).
pub struct Series {
    pub name: String,
    pub points: Vec<(u32, f64)>,
    pub dashed: bool,
    /// Lines with the same colour key share a colour (an algorithm's p50
    /// and p99).
    pub colour_key: String,
}

/// One panel: a title, the y axis's unit, its lines.
pub struct Panel {
    pub title: String,
    pub unit: String,
    pub series: Vec<Series>,
}

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;

/// The panels one under another, in one SVG document.
pub fn render(panels: &[Panel]) -> String {
    let height = H * panels.len().max(1) as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let mut keys: Vec<&str> = Vec::new();
    for p in panels {
        for s in &p.series {
            if !keys.contains(&s.colour_key.as_str()) {
                keys.push(&s.colour_key);
            }
        }
    }
    for (i, panel) in panels.iter().enumerate() {
        let _ = writeln!(svg, "<g transform=\"translate(0,{})\">", H * i as f64);
        draw(&mut svg, panel, &keys);
        svg.push_str("</g>\n");
    }
    svg + "</svg>\n"
}

fn draw(svg: &mut String, panel: &Panel, keys: &[&str]) {
    let points = panel.series.iter().flat_map(|s| s.points.iter());
    let (min_n, max_n, max_y) =
        points.fold((u32::MAX, 0, 0.0f64), |(lo, hi, y), &(n, v)| (lo.min(n), hi.max(n), y.max(v)));
    let (min_n, max_n) = if min_n > max_n { (2, 3) } else { (min_n, max_n) };
    let max_y = nice_ceiling(max_y.max(1e-9));
    let span_n = f64::from(max_n - min_n).max(1.0);
    let x = |n: u32| LEFT + f64::from(n - min_n) / span_n * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v / max_y * (H - TOP - BOTTOM);
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"18\" text-anchor=\"middle\">{}</text>",
        (W - RIGHT + LEFT) / 2.0,
        panel.title
    );
    let _ = writeln!(
        svg,
        "<line x1=\"{LEFT}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"black\"/>\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{0}\" stroke=\"black\"/>",
        H - BOTTOM,
        W - RIGHT
    );
    let mut ns: Vec<u32> = panel.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    ns.sort_unstable();
    ns.dedup();
    for n in ns {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{n}</text>",
            x(n),
            H - BOTTOM + 18.0
        );
    }
    for i in 0..=5 {
        let v = max_y * f64::from(i) / 5.0;
        let _ = writeln!(
            svg,
            "<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\">{3}</text>\
             <line x1=\"{LEFT}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#ddd\"/>",
            LEFT - 6.0,
            y(v),
            W - RIGHT,
            short(v)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">N (nodes)</text>\
         <text x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
        (W - RIGHT + LEFT) / 2.0,
        H - 12.0,
        (H - BOTTOM + TOP) / 2.0,
        (H - BOTTOM + TOP) / 2.0,
        panel.unit
    );
    for (i, s) in panel.series.iter().enumerate() {
        let k = keys.iter().position(|k| *k == s.colour_key).unwrap_or(i);
        let colour = COLOURS[k % COLOURS.len()];
        let dash = if s.dashed { " stroke-dasharray=\"6,4\"" } else { "" };
        let pts: Vec<String> =
            s.points.iter().map(|&(n, v)| format!("{:.1},{:.1}", x(n), y(v))).collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
            pts.join(" ")
        );
        for &(n, v) in &s.points {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/>",
                x(n),
                y(v)
            );
        }
        let ly = TOP + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            svg,
            "<line x1=\"{0}\" y1=\"{ly}\" x2=\"{1}\" y2=\"{ly}\" stroke=\"{colour}\" \
             stroke-width=\"2\"{dash}/><text x=\"{2}\" y=\"{3}\">{4}</text>",
            W - RIGHT + 15.0,
            W - RIGHT + 35.0,
            W - RIGHT + 40.0,
            ly + 4.0,
            s.name
        );
    }
}

/// The axis's top: 1, 2 or 5 times a power of ten, at least `v`.
fn nice_ceiling(v: f64) -> f64 {
    let power = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|&c| c >= v).unwrap_or(power * 10.0)
}

fn short(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panel_per_measure_a_line_per_series() {
        let series = |name: &str, dashed| Series {
            name: name.into(),
            points: vec![(3, 1.0), (5, 2.5), (9, 7.0)],
            dashed,
            colour_key: "ra".into(),
        };
        let svg = render(&[
            Panel { title: "a".into(), unit: "u".into(), series: vec![series("ra", false)] },
            Panel {
                title: "b".into(),
                unit: "v".into(),
                series: vec![series("p50", false), series("p99", true)],
            },
        ]);
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(svg.matches("stroke-dasharray").count(), 2, "the dashed line and its legend");
        assert_eq!(svg.matches("<circle").count(), 9);
        assert!(svg.contains("translate(0,460)"));
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(1200.0), 2000.0);
    }
}
