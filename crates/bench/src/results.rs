//! What `run` writes: the records as CSV, a summary by scenario, system and worker count
//! (medians over the repeats, with their spread), and an HTML page with inline SVG charts.

use std::fmt::Write;

use crate::data::Priced;
use crate::run::{RunRecord, Sweep};
use crate::stats::Spread;

/// The repeats of one scenario, system and worker count, summarized.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub scenario: String,
    pub system: String,
    pub workers: u32,
    /// Runs that counted (no failure, no errors) out of all runs.
    pub good_runs: usize,
    pub runs: usize,
    pub requests_per_s: Option<Spread>,
    /// CPU microseconds per request.
    pub cpu_us: Option<Spread>,
    pub latency_p99_ms: Option<Spread>,
    pub transfer_per_s: Option<Spread>,
    pub syscalls_per_request: Option<f64>,
    /// Errors over all runs, and the first failure message.
    pub errors: u64,
    pub failure: Option<String>,
}

impl Summary {
    /// Requests per second one core serves: 1 / CPU seconds per request.
    pub fn per_core(&self) -> Option<f64> {
        self.cpu_us.map(|s| 1e6 / s.median)
    }
}

/// Groups `records` by scenario, system and workers, in first-seen order.
pub fn summarize(records: &[RunRecord]) -> Vec<Summary> {
    let mut keys: Vec<(&str, &str, u32)> = Vec::new();
    for r in records {
        let key = (r.scenario.as_str(), r.system.as_str(), r.workers);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(scenario, system, workers)| {
            let runs: Vec<&RunRecord> = records
                .iter()
                .filter(|r| r.scenario == scenario && r.system == system && r.workers == workers)
                .collect();
            let good: Vec<&RunRecord> = runs.iter().copied().filter(|r| r.succeeded()).collect();
            let spread = |f: &dyn Fn(&RunRecord) -> Option<f64>| {
                Spread::of(&good.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            Summary {
                scenario: scenario.to_owned(),
                system: system.to_owned(),
                workers,
                good_runs: good.len(),
                runs: runs.len(),
                requests_per_s: spread(&|r| r.requests_per_s),
                cpu_us: spread(&|r| Some(r.cpu_per_request() * 1e6)),
                latency_p99_ms: spread(&|r| r.latency_p99_ms),
                transfer_per_s: spread(&|r| r.transfer_per_s),
                syscalls_per_request: runs.iter().find_map(|r| r.syscalls_per_request),
                errors: runs.iter().map(|r| r.errors).sum(),
                failure: runs.iter().find_map(|r| r.failure.clone()),
            }
        })
        .collect()
}

/// CPU per request of `s` over nginx's in the same scenario and worker count.
pub fn ratio_to_nginx(all: &[Summary], s: &Summary) -> Option<f64> {
    let nginx = all
        .iter()
        .find(|n| n.system == "nginx" && n.scenario == s.scenario && n.workers == s.workers)?;
    Some(s.cpu_us?.median / nginx.cpu_us?.median)
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// Every record as one CSV row.
pub fn csv(records: &[RunRecord]) -> String {
    let mut out = String::from(
        "scenario,system,workers,round,cpus,duration_s,requests,requests_per_s,transfer_per_s,\
         latency_p50_ms,latency_p90_ms,latency_p99_ms,latency_max_ms,non_2xx,socket_errors,\
         errors,cpu_s,cpu_us_per_request,requests_per_s_per_core,syscalls_per_request,failure\n",
    );
    for r in records {
        let (cpu_us, per_core) = if r.requests > 0 && r.cpu_s > 0.0 {
            let us = r.cpu_per_request() * 1e6;
            (format!("{us:.3}"), format!("{:.0}", 1e6 / us))
        } else {
            (String::new(), String::new())
        };
        let num = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v}"));
        let int = |v: Option<u64>| v.map_or_else(String::new, |v| v.to_string());
        let failure = r
            .failure
            .as_deref()
            .map_or_else(String::new, |f| format!("\"{}\"", f.replace('"', "\"\"")));
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{cpu_us},{per_core},{},{failure}",
            r.scenario,
            r.system,
            r.workers,
            r.round.map_or_else(String::new, |v| v.to_string()),
            r.cpus.map_or_else(String::new, |v| v.to_string()),
            r.duration_s,
            r.requests,
            num(r.requests_per_s),
            num(r.transfer_per_s),
            num(r.latency_p50_ms),
            num(r.latency_p90_ms),
            num(r.latency_p99_ms),
            num(r.latency_max_ms),
            int(r.non_2xx),
            int(r.socket_errors),
            r.errors,
            r.cpu_s,
            num(r.syscalls_per_request),
        );
    }
    out
}

/// The summary as an aligned text table, for the terminal.
pub fn text_table(summaries: &[Summary]) -> String {
    let mut rows = vec![[
        "scenario".to_owned(),
        "system".to_owned(),
        "workers".to_owned(),
        "req/s".to_owned(),
        "±".to_owned(),
        "p99 ms".to_owned(),
        "CPU µs/req".to_owned(),
        "req/s/core".to_owned(),
        "syscalls/req".to_owned(),
        "vs nginx".to_owned(),
        "errors".to_owned(),
    ]];
    for s in summaries {
        let errors = match &s.failure {
            Some(f) if s.good_runs == 0 => format!("failed: {f}"),
            _ => s.errors.to_string(),
        };
        rows.push([
            s.scenario.clone(),
            s.system.clone(),
            s.workers.to_string(),
            opt(s.requests_per_s.map(|r| r.median), 0),
            s.requests_per_s.map_or_else(
                || "-".to_owned(),
                |r| format!("{:.1}%", r.relative() * 100.0),
            ),
            opt(s.latency_p99_ms.map(|r| r.median), 2),
            opt(s.cpu_us.map(|r| r.median), 2),
            opt(s.per_core(), 0),
            opt(s.syscalls_per_request, 1),
            opt(ratio_to_nginx(summaries, s), 2),
            errors,
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                if i < 2 || i == row.len() - 1 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Colours of the systems in the charts, in order of appearance.
const COLOURS: [&str; 4] = ["#1f77b4", "#2ca02c", "#d62728", "#9467bd"];
const CHART_W: f64 = 560.0;
const CHART_H: f64 = 280.0;
/// Room for axis labels left and below, and the legend on top.
const MARGIN_L: f64 = 70.0;
const MARGIN_B: f64 = 40.0;
const MARGIN_T: f64 = 30.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn systems_of(summaries: &[Summary]) -> Vec<String> {
    let mut systems: Vec<String> = Vec::new();
    for s in summaries {
        if !systems.contains(&s.system) {
            systems.push(s.system.clone());
        }
    }
    systems
}

fn legend(out: &mut String, systems: &[String]) {
    for (i, system) in systems.iter().enumerate() {
        let x = MARGIN_L + i as f64 * 120.0;
        let _ = write!(
            out,
            r#"<rect x="{x}" y="8" width="12" height="12" fill="{}"/><text x="{}" y="19" font-size="12">{}</text>"#,
            COLOURS[i % COLOURS.len()],
            x + 16.0,
            escape(system)
        );
    }
}

/// Axes with a few labelled ticks on y from 0 to `top`.
fn axes(out: &mut String, top: f64, y_label: &str) {
    let bottom = CHART_H - MARGIN_B;
    let _ = write!(
        out,
        r##"<line x1="{MARGIN_L}" y1="{MARGIN_T}" x2="{MARGIN_L}" y2="{bottom}" stroke="#333"/><line x1="{MARGIN_L}" y1="{bottom}" x2="{CHART_W}" y2="{bottom}" stroke="#333"/>"##
    );
    for i in 0..=4 {
        let value = top * f64::from(i) / 4.0;
        let y = bottom - (bottom - MARGIN_T) * f64::from(i) / 4.0;
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text><line x1="{MARGIN_L}" y1="{y}" x2="{CHART_W}" y2="{y}" stroke="#eee"/>"##,
            MARGIN_L - 6.0,
            y + 4.0,
            compact(value)
        );
    }
    let _ = write!(
        out,
        r#"<text x="14" y="{}" font-size="12" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"#,
        CHART_H / 2.0,
        CHART_H / 2.0,
        escape(y_label)
    );
}

fn compact(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Requests/s against workers, one line per system (as seed 004's charts).
pub fn sweep_chart(summaries: &[Summary], scenario: &str) -> String {
    let rows: Vec<&Summary> = summaries
        .iter()
        .filter(|s| s.scenario == scenario)
        .collect();
    let systems = systems_of(summaries);
    let max_workers = rows.iter().map(|s| s.workers).max().unwrap_or(1).max(1);
    let top = rows
        .iter()
        .filter_map(|s| s.requests_per_s.map(|r| r.max))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{CHART_H}" role="img" aria-label="requests per second against workers, {}">"#,
        escape(scenario)
    );
    axes(&mut out, top, "requests/s");
    let bottom = CHART_H - MARGIN_B;
    let x_of = |w: u32| {
        MARGIN_L + 20.0 + (CHART_W - MARGIN_L - 40.0) * f64::from(w) / f64::from(max_workers)
    };
    let y_of = |v: f64| bottom - (bottom - MARGIN_T) * v / top;
    let mut workers: Vec<u32> = rows.iter().map(|s| s.workers).collect();
    workers.sort_unstable();
    workers.dedup();
    for w in &workers {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">{w}</text>"#,
            x_of(*w),
            bottom + 16.0
        );
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">workers</text>"#,
        (CHART_W + MARGIN_L) / 2.0,
        CHART_H - 6.0
    );
    for (i, system) in systems.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points: Vec<(u32, f64)> = rows
            .iter()
            .filter(|s| &s.system == system)
            .filter_map(|s| Some((s.workers, s.requests_per_s?.median)))
            .collect();
        points.sort_by_key(|p| p.0);
        let path: Vec<String> = points
            .iter()
            .map(|&(w, v)| format!("{:.1},{:.1}", x_of(w), y_of(v)))
            .collect();
        if path.len() > 1 {
            let _ = write!(
                out,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
        }
        for &(w, v) in &points {
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{colour}"><title>{} {w} workers: {v:.0} req/s</title></circle>"#,
                x_of(w),
                y_of(v),
                escape(system)
            );
        }
    }
    legend(&mut out, &systems);
    out.push_str("</svg>");
    out
}

/// Grouped bars: one group per label, one bar per system.
fn bar_chart(groups: &[(String, Vec<(String, f64)>)], systems: &[String], y_label: &str) -> String {
    let top = groups
        .iter()
        .flat_map(|(_, bars)| bars.iter().map(|b| b.1))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let width = (MARGIN_L + 40.0 + groups.len() as f64 * 110.0).max(CHART_W);
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{CHART_H}" role="img" aria-label="{}">"#,
        escape(y_label)
    );
    axes(&mut out, top, y_label);
    let bottom = CHART_H - MARGIN_B;
    let bar_w = 90.0 / systems.len().max(1) as f64;
    for (g, (label, bars)) in groups.iter().enumerate() {
        let x0 = MARGIN_L + 20.0 + g as f64 * 110.0;
        for (system, value) in bars {
            let i = systems.iter().position(|s| s == system).unwrap_or(0);
            let h = (bottom - MARGIN_T) * value / top;
            let _ = write!(
                out,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{} {}: {}</title></rect>"#,
                x0 + i as f64 * bar_w,
                bottom - h,
                bar_w - 2.0,
                COLOURS[i % COLOURS.len()],
                escape(label),
                escape(system),
                compact(*value)
            );
        }
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
            x0 + 45.0,
            bottom + 16.0,
            escape(label)
        );
    }
    legend(&mut out, systems);
    out.push_str("</svg>");
    out
}

/// CPU µs per request by scenario, the systems side by side, at the smallest worker count.
pub fn cpu_chart(summaries: &[Summary]) -> String {
    let systems = systems_of(summaries);
    let mut groups: Vec<(String, Vec<(String, f64)>)> = Vec::new();
    for s in summaries {
        let least = summaries
            .iter()
            .filter(|o| o.scenario == s.scenario)
            .map(|o| o.workers)
            .min();
        let Some(cpu) = s.cpu_us.filter(|_| Some(s.workers) == least) else {
            continue;
        };
        match groups.iter_mut().find(|(label, _)| *label == s.scenario) {
            Some((_, bars)) => bars.push((s.system.clone(), cpu.median)),
            None => groups.push((s.scenario.clone(), vec![(s.system.clone(), cpu.median)])),
        }
    }
    bar_chart(&groups, &systems, "CPU µs per request")
}

/// Estimated max requests/s per dollar-hour of each catalog instance of this machine's
/// architecture, per system, for one scenario, from the sweep of its records.
pub fn per_dollar_chart(
    records: &[RunRecord],
    scenario: &str,
    catalog: &[Priced],
) -> Option<String> {
    let systems: Vec<String> = systems_of(&summarize(records));
    // The families of this machine's architecture: a run says nothing of another's cores.
    let arm = matches!(std::env::consts::ARCH, "aarch64" | "arm");
    let catalog: Vec<&Priced> = catalog
        .iter()
        .filter(|p| crate::run::is_arm_family(crate::data::family(&p.instance)) == arm)
        .collect();
    let mut groups: Vec<(String, Vec<(String, f64)>)> = catalog
        .iter()
        .map(|p| (p.instance.clone(), Vec::new()))
        .collect();
    let mut any = false;
    for system in &systems {
        let Ok(sweep) = Sweep::from_records(records, Some(system), Some(scenario)) else {
            continue;
        };
        for (p, (_, bars)) in catalog.iter().zip(groups.iter_mut()) {
            bars.push((system.clone(), sweep.max_rps(p.vcpus) / p.usd_per_hour));
            any = true;
        }
    }
    any.then(|| bar_chart(&groups, &systems, "max requests/s per $/hour"))
}

/// The whole report: summary table, the charts, and the method.
pub fn html(records: &[RunRecord], catalog: Option<&[Priced]>, method: &str) -> String {
    let summaries = summarize(records);
    let mut out = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>portcullis-bench run</title>\
         <style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:3px 8px}td.n{text-align:right}\
         td.bad{background:#fdd}</style></head><body>\n<h1>portcullis-bench run</h1>\n",
    );
    let _ = writeln!(out, "<p>{}</p>", escape(method));
    out.push_str(
        "<table><tr><th>scenario</th><th>system</th><th>workers</th><th>req/s</th><th>±</th>\
         <th>p99 ms</th><th>CPU µs/req</th><th>req/s per core</th><th>syscalls/req</th>\
         <th>vs nginx</th><th>errors</th></tr>\n",
    );
    for s in &summaries {
        let errors = match &s.failure {
            Some(f) if s.good_runs == 0 => format!("failed: {f}"),
            _ => s.errors.to_string(),
        };
        let bad = if s.errors > 0 || s.good_runs == 0 {
            " class=\"bad\""
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td{bad}>{}</td></tr>",
            escape(&s.scenario),
            escape(&s.system),
            s.workers,
            opt(s.requests_per_s.map(|r| r.median), 0),
            s.requests_per_s
                .map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", r.relative() * 100.0)),
            opt(s.latency_p99_ms.map(|r| r.median), 2),
            opt(s.cpu_us.map(|r| r.median), 2),
            opt(s.per_core(), 0),
            opt(s.syscalls_per_request, 1),
            opt(ratio_to_nginx(&summaries, s), 2),
            escape(&errors)
        );
    }
    out.push_str("</table>\n<h2>CPU per request</h2>\n");
    out.push_str(&cpu_chart(&summaries));
    let mut scenarios: Vec<&str> = Vec::new();
    for s in &summaries {
        if !scenarios.contains(&s.scenario.as_str()) {
            scenarios.push(&s.scenario);
        }
    }
    for scenario in &scenarios {
        let _ = writeln!(
            out,
            "\n<h2>{}: requests/s against workers</h2>",
            escape(scenario)
        );
        out.push_str(&sweep_chart(&summaries, scenario));
        if let Some(catalog) = catalog {
            if let Some(chart) = per_dollar_chart(records, scenario, catalog) {
                let _ = writeln!(
                    out,
                    "\n<h3>{}: requests/s per dollar</h3>",
                    escape(scenario)
                );
                out.push_str(&chart);
            }
        }
    }
    out.push_str("\n</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(system: &str, workers: u32, round: u32, rps: f64, cpu_s: f64) -> RunRecord {
        let mut r = RunRecord::new("web-1k", system, workers);
        r.round = Some(round);
        r.duration_s = 2.0;
        r.requests = (rps * 2.0) as u64;
        r.requests_per_s = Some(rps);
        r.cpu_s = cpu_s;
        r
    }

    fn records() -> Vec<RunRecord> {
        let mut failed = RunRecord::new("web-1k", "haproxy", 1);
        failed.failure = Some("HAProxy does not serve files".into());
        vec![
            record("nginx", 1, 1, 1000.0, 1.0),
            record("portcullis", 1, 1, 1200.0, 0.5),
            record("nginx", 1, 2, 1100.0, 1.0),
            record("portcullis", 1, 2, 1300.0, 0.5),
            record("nginx", 2, 1, 1800.0, 2.0),
            failed,
        ]
    }

    #[test]
    fn summary_takes_medians_and_ratios() {
        let all = summarize(&records());
        assert_eq!(all.len(), 4);
        let p = &all[1];
        assert_eq!((p.system.as_str(), p.workers, p.runs), ("portcullis", 1, 2));
        assert_eq!(p.requests_per_s.unwrap().median, 1250.0);
        let ratio = ratio_to_nginx(&all, p).unwrap();
        // portcullis: 0.5 s over 2400 and 2600 requests; nginx: 1 s over 2000 and 2200.
        let expected =
            ((0.5e6 / 2400.0 + 0.5e6 / 2600.0) / 2.0) / ((1e6 / 2000.0 + 1e6 / 2200.0) / 2.0);
        assert!((ratio - expected).abs() < 1e-9, "{ratio} {expected}");
        let h = &all[3];
        assert_eq!((h.good_runs, h.cpu_us), (0, None));
        assert!(text_table(&all).contains("failed: HAProxy does not serve files"));
    }

    #[test]
    fn csv_has_a_row_per_record() {
        let text = csv(&records());
        assert_eq!(text.lines().count(), 7);
        assert!(text
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("web-1k,nginx,1,1,"));
        assert!(
            text.ends_with(",\"HAProxy does not serve files\"\n"),
            "{text}"
        );
    }

    #[test]
    fn html_has_the_charts() {
        let page = html(&records(), None, "method <here>");
        assert!(page.contains("method &lt;here&gt;"));
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("<polyline"), "the nginx sweep has two points");
        assert!(page.contains("<title>web-1k portcullis:"));
    }

    #[test]
    fn per_dollar_uses_the_sweep() {
        let catalog = vec![Priced {
            instance: "c5.large".into(),
            vcpus: 2,
            usd_per_hour: 0.1,
            source: String::new(),
        }];
        let chart = per_dollar_chart(&records(), "web-1k", &catalog).unwrap();
        assert!(chart.contains("c5.large nginx"), "{chart}");
    }
}
