//! Inline SVG charts for the run report: grouped bars (with a reference line, and a mark
//! for a system a scenario does not apply to) and lines, on axes with round ticks that fit
//! the widest chart, and x labels slanted so that long names do not run into each other.

use std::fmt::Write;

pub const COLOURS: [&str; 6] = [
    "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b",
];

/// The systems with a colour of their own, in [`COLOURS`]' order.
const NAMED: [&str; 4] = ["portcullis", "nginx", "haproxy", "l4-floor"];

/// A system's colour, the same in every chart: one each for the systems `run` knows, then
/// the rest by their order among the other systems (a chart without nginx, such as the
/// ratio to nginx, gives them the same colours as one with it).
pub fn colour(system: &str, systems: &[String]) -> &'static str {
    if let Some(i) = NAMED.iter().position(|&n| n == system) {
        return COLOURS[i];
    }
    let i = systems
        .iter()
        .filter(|s| !NAMED.contains(&s.as_str()))
        .position(|s| s == system)
        .unwrap_or(0);
    COLOURS[NAMED.len() + i % (COLOURS.len() - NAMED.len())]
}
const CHART_H: f64 = 300.0;
const MIN_W: f64 = 560.0;
const MARGIN_L: f64 = 70.0;
/// Room under the axis for slanted labels.
const MARGIN_B: f64 = 90.0;
const MARGIN_T: f64 = 34.0;
const GROUP_W: f64 = 70.0;

/// Text for SVG and HTML, in elements and in attribute values.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round step for about four ticks up to `top`: 1, 2 or 5 times a power of ten.
pub fn nice_step(top: f64) -> f64 {
    let raw = (top / 4.0).max(f64::MIN_POSITIVE);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * power)
}

/// A tick's label: as many decimals as the step needs, thousands as `k`, millions as `M`.
pub fn tick(value: f64, step: f64) -> String {
    if value == 0.0 {
        return "0".to_owned();
    }
    let (v, s, suffix) = if step >= 1e6 {
        (value / 1e6, step / 1e6, "M")
    } else if step >= 1e3 {
        (value / 1e3, step / 1e3, "k")
    } else {
        (value, step, "")
    };
    let decimals = if s >= 1.0 {
        0
    } else {
        (-s.log10().floor()) as usize
    };
    format!("{v:.decimals$}{suffix}")
}

/// A chart under construction: its width, the y range, and the SVG so far.
pub struct Chart {
    pub svg: String,
    pub width: f64,
    top: f64,
}

impl Chart {
    /// A chart `width` wide (at least the minimum) with a y axis from 0 to past `max`.
    pub fn new(width: f64, max: f64, y_label: &str, aria: &str) -> Chart {
        let width = width.max(MIN_W);
        let step = nice_step(max.max(1e-9) * 1.05);
        let ticks = (max.max(1e-9) * 1.05 / step).ceil().max(1.0);
        let top = step * ticks;
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{CHART_H}" role="img" aria-label="{}">"#,
            escape(aria)
        );
        let bottom = CHART_H - MARGIN_B;
        let _ = write!(
            svg,
            r##"<line x1="{MARGIN_L}" y1="{MARGIN_T}" x2="{MARGIN_L}" y2="{bottom}" stroke="#333"/><line x1="{MARGIN_L}" y1="{bottom}" x2="{width}" y2="{bottom}" stroke="#333"/>"##
        );
        for i in 0..=(ticks as u32) {
            let value = step * f64::from(i);
            let y = bottom - (bottom - MARGIN_T) * value / top;
            let _ = write!(
                svg,
                r##"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text><line x1="{MARGIN_L}" y1="{y:.1}" x2="{width}" y2="{y:.1}" stroke="#eee"/>"##,
                MARGIN_L - 6.0,
                y + 4.0,
                tick(value, step)
            );
        }
        let mid = (CHART_H - MARGIN_B + MARGIN_T) / 2.0;
        let _ = write!(
            svg,
            r#"<text x="14" y="{mid}" font-size="12" transform="rotate(-90 14 {mid})" text-anchor="middle">{}</text>"#,
            escape(y_label)
        );
        Chart { svg, width, top }
    }

    pub fn bottom(&self) -> f64 {
        CHART_H - MARGIN_B
    }

    pub fn y(&self, value: f64) -> f64 {
        self.bottom() - (self.bottom() - MARGIN_T) * value / self.top
    }

    /// A label under the axis at `x`, slanted.
    pub fn x_label(&mut self, x: f64, label: &str) {
        let y = self.bottom() + 14.0;
        let _ = write!(
            self.svg,
            r#"<text x="{x:.1}" y="{y}" font-size="11" text-anchor="end" transform="rotate(-35 {x:.1} {y})">{}</text>"#,
            escape(label)
        );
    }

    /// A dashed horizontal line at `value`, labelled.
    pub fn reference(&mut self, value: f64, label: &str) {
        let y = self.y(value);
        let _ = write!(
            self.svg,
            r##"<line x1="{MARGIN_L}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#000" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            self.width,
            self.width - 4.0,
            y - 4.0,
            escape(label)
        );
    }

    pub fn legend(&mut self, systems: &[String]) {
        for (i, system) in systems.iter().enumerate() {
            let x = MARGIN_L + i as f64 * 120.0;
            let _ = write!(
                self.svg,
                r#"<rect x="{x}" y="8" width="12" height="12" fill="{}"/><text x="{}" y="19" font-size="12">{}</text>"#,
                colour(system, systems),
                x + 16.0,
                escape(system)
            );
        }
    }

    pub fn finish(mut self) -> String {
        self.svg.push_str("</svg>");
        self.svg
    }
}

/// One bar of a group: a system's value, or why it has none (`Err`: "not applicable").
pub type Bar = (String, Result<f64, String>);

/// A group of bars under one label.
pub type Group = (String, Vec<Bar>);

/// Grouped bars: one group per label, one bar per system; a bar without a value is a grey
/// mark that says why. `reference` draws a dashed line at a value (the 1.0 of a ratio).
pub fn bars(
    groups: &[Group],
    systems: &[String],
    y_label: &str,
    reference: Option<(f64, &str)>,
) -> String {
    let max = groups
        .iter()
        .flat_map(|(_, bars)| bars.iter().filter_map(|b| b.1.as_ref().ok().copied()))
        .chain(reference.map(|r| r.0))
        .fold(0.0, f64::max);
    let width = MARGIN_L + 30.0 + groups.len() as f64 * GROUP_W;
    let mut c = Chart::new(width, max, y_label, y_label);
    let bar_w = (GROUP_W - 14.0) / systems.len().max(1) as f64;
    for (g, (label, bars)) in groups.iter().enumerate() {
        let x0 = MARGIN_L + 16.0 + g as f64 * GROUP_W;
        for (system, value) in bars {
            let i = systems.iter().position(|s| s == system).unwrap_or(0);
            let x = x0 + i as f64 * bar_w;
            match value {
                Ok(v) => {
                    let y = c.y(*v);
                    let _ = write!(
                        c.svg,
                        r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {v:.2}</title></rect>"#,
                        bar_w - 2.0,
                        c.bottom() - y,
                        colour(system, systems),
                        escape(label),
                        escape(system),
                    );
                }
                Err(why) => {
                    let y = c.bottom() - 4.0;
                    let _ = write!(
                        c.svg,
                        r##"<text x="{:.1}" y="{y}" font-size="9" fill="#888" transform="rotate(-90 {:.1} {y})">n/a<title>{} {}: {}</title></text>"##,
                        x + bar_w / 2.0 + 3.0,
                        x + bar_w / 2.0 + 3.0,
                        escape(label),
                        escape(system),
                        escape(why)
                    );
                }
            }
        }
        c.x_label(x0 + (GROUP_W - 14.0) / 2.0 + 4.0, label);
    }
    if let Some((value, label)) = reference {
        c.reference(value, label);
    }
    c.legend(systems);
    c.finish()
}

/// Lines of (x, y) points, one per system, over labelled x positions `xs`.
pub fn lines(
    series: &[(String, Vec<(f64, f64)>)],
    systems: &[String],
    (x_label, y_label): (&str, &str),
    xs: &[(f64, String)],
    aria: &str,
) -> String {
    let max = series
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let x_max = xs.iter().map(|x| x.0).fold(1.0, f64::max);
    let mut c = Chart::new(MIN_W, max, y_label, aria);
    let x_of = |x: f64| MARGIN_L + 20.0 + (MIN_W - MARGIN_L - 40.0) * x / x_max;
    for (x, label) in xs {
        c.x_label(x_of(*x) + 4.0, label);
    }
    let _ = write!(
        c.svg,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
        (MIN_W + MARGIN_L) / 2.0,
        CHART_H - 6.0,
        escape(x_label)
    );
    for (system, points) in series {
        let colour = colour(system, systems);
        let path: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", x_of(x), c.y(y)))
            .collect();
        if path.len() > 1 {
            let _ = write!(
                c.svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
        }
        for &(x, y) in points {
            let _ = write!(
                c.svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"><title>{} {x}: {y:.2}</title></circle>"#,
                x_of(x),
                c.y(y),
                escape(system)
            );
        }
    }
    c.legend(systems);
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_keeps_its_colour_in_every_chart() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let all = names(&["portcullis", "nginx", "l4-floor", "other", "more"]);
        let without_nginx = names(&["portcullis", "l4-floor", "other", "more"]);
        for system in ["portcullis", "l4-floor", "other", "more"] {
            assert_eq!(
                colour(system, &all),
                colour(system, &without_nginx),
                "{system}"
            );
        }
        assert_ne!(colour("other", &all), colour("more", &all));
        assert_ne!(colour("other", &all), colour("l4-floor", &all));
    }

    #[test]
    fn ticks_are_round_and_readable() {
        assert_eq!(nice_step(1400.0), 500.0);
        assert_eq!(nice_step(4.0), 1.0);
        assert_eq!(nice_step(0.9), 0.5);
        assert_eq!(tick(1000.0, 500.0), "1000");
        assert_eq!(tick(1500.0, 500.0), "1500");
        assert_eq!(tick(2_000_000.0, 1_000_000.0), "2M");
        assert_eq!(tick(15_000.0, 5_000.0), "15k");
        assert_eq!(tick(0.5, 0.5), "0.5");
        assert_eq!(tick(0.2, 0.1), "0.2");
        assert_eq!(tick(0.0, 0.5), "0");
    }

    #[test]
    fn bars_fit_their_axis_and_mark_what_does_not_apply() {
        let groups: Vec<Group> = (0..22)
            .map(|i| {
                (
                    format!("scenario-with-a-long-name-{i}"),
                    vec![
                        ("portcullis".to_owned(), Ok(1.0 + f64::from(i))),
                        ("nginx".to_owned(), Err("no auth_jwt".to_owned())),
                    ],
                )
            })
            .collect();
        let systems = vec!["portcullis".to_owned(), "nginx".to_owned()];
        let svg = bars(&groups, &systems, "ratio", Some((1.0, "nginx")));
        let width: f64 = svg
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap();
        let axis_end: f64 = svg
            .split("y2=\"")
            .nth(1)
            .and_then(|_| svg.split(r#"x2=""#).nth(2))
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap();
        assert_eq!(width, axis_end, "the x axis spans the whole chart");
        assert_eq!(svg.matches(">n/a<").count(), 22);
        assert!(svg.contains("stroke-dasharray"), "the reference line");
        assert!(svg.contains("rotate(-35"), "slanted labels");
    }
}
