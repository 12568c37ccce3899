//! What `run` writes: the records as CSV, a summary by scenario, system and worker count
//! (medians over the repeats, with their spread), and an HTML page with inline SVG charts.

use std::fmt::Write;

use crate::charts::{self, escape, Bar, Group};
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
    /// The kernel's share of the CPU, over the runs that measured it.
    pub kernel_share: Option<f64>,
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
                kernel_share: kernel_share(&good),
                latency_p99_ms: spread(&|r| r.latency_p99_ms),
                transfer_per_s: spread(&|r| r.transfer_per_s),
                syscalls_per_request: runs.iter().find_map(|r| r.syscalls_per_request),
                errors: runs.iter().map(|r| r.errors).sum(),
                failure: runs.iter().find_map(|r| r.failure.clone()),
            }
        })
        .collect()
}

/// Kernel seconds over CPU seconds of the runs that measured both.
fn kernel_share(runs: &[&RunRecord]) -> Option<f64> {
    let measured: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|r| Some((r.cpu_system_s?, r.cpu_s)))
        .collect();
    let cpu: f64 = measured.iter().map(|m| m.1).sum();
    (cpu > 0.0).then(|| measured.iter().map(|m| m.0).sum::<f64>() / cpu)
}

/// CPU per request of `s` over nginx's in the same scenario and worker count.
pub fn ratio_to_nginx(all: &[Summary], s: &Summary) -> Option<f64> {
    let nginx = all
        .iter()
        .find(|n| n.system == "nginx" && n.scenario == s.scenario && n.workers == s.workers)?;
    Some(s.cpu_us?.median / nginx.cpu_us?.median)
}

fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| "-".to_owned(), |s| format!("{:.0}%", s * 100.0))
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// Every record as one CSV row.
pub fn csv(records: &[RunRecord]) -> String {
    let mut out = String::from(
        "scenario,system,workers,round,cpus,duration_s,requests,requests_per_s,transfer_per_s,\
         latency_p50_ms,latency_p90_ms,latency_p99_ms,latency_max_ms,non_2xx,socket_errors,\
         errors,cpu_s,cpu_us_per_request,requests_per_s_per_core,syscalls_per_request,failure,\
         cpu_system_s\n",
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
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{cpu_us},{per_core},{},{failure},{}",
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
            num(r.cpu_system_s),
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
        "kernel".to_owned(),
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
            percent(s.kernel_share),
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

fn systems_of(summaries: &[Summary]) -> Vec<String> {
    let mut systems: Vec<String> = Vec::new();
    for s in summaries {
        if !systems.contains(&s.system) {
            systems.push(s.system.clone());
        }
    }
    systems
}

/// Why a system has no figures in a scenario that does not apply to it (`None`: a failure).
/// The run says so itself (`not applicable: ...`); older runs said it as a failure.
pub fn not_applicable(failure: &str) -> Option<String> {
    if let Some(why) = failure.strip_prefix(crate::run::NOT_APPLICABLE) {
        return Some(why.to_owned());
    }
    if failure.starts_with("HAProxy does not serve files") {
        return Some("HAProxy serves no files".to_owned());
    }
    if failure.contains("unknown directive \"auth_jwt\"") {
        return Some("auth_jwt is NGINX Plus's, not in open source nginx".to_owned());
    }
    None
}

/// The scenarios of `summaries`, in first-seen order.
fn scenarios_of(summaries: &[Summary]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in summaries {
        if !out.contains(&s.scenario.as_str()) {
            out.push(&s.scenario);
        }
    }
    out
}

/// The summaries at each scenario's smallest worker count.
fn at_fewest_workers(summaries: &[Summary]) -> Vec<&Summary> {
    summaries
        .iter()
        .filter(|s| {
            let fewest = summaries
                .iter()
                .filter(|o| o.scenario == s.scenario)
                .map(|o| o.workers)
                .min();
            Some(s.workers) == fewest
        })
        .collect()
}

/// A summary's bar: its value, or why it has none.
fn bar(s: &Summary, value: Option<f64>) -> Bar {
    let value = value.ok_or_else(|| {
        s.failure
            .as_deref()
            .and_then(not_applicable)
            .unwrap_or_else(|| "failed".to_owned())
    });
    (s.system.clone(), value)
}

/// Requests/s against workers, one line per system (as seed 004's charts): only where more
/// than one worker count was run.
pub fn sweep_chart(summaries: &[Summary], scenario: &str) -> Option<String> {
    let rows: Vec<&Summary> = summaries
        .iter()
        .filter(|s| s.scenario == scenario)
        .collect();
    let mut workers: Vec<u32> = rows.iter().map(|s| s.workers).collect();
    workers.sort_unstable();
    workers.dedup();
    if workers.len() < 2 {
        return None;
    }
    let systems = systems_of(summaries);
    let series: Vec<(String, Vec<(f64, f64)>)> = systems
        .iter()
        .map(|system| {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|s| &s.system == system)
                .filter_map(|s| Some((f64::from(s.workers), s.requests_per_s?.median)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (system.clone(), points)
        })
        .collect();
    let xs: Vec<(f64, String)> = workers
        .iter()
        .map(|w| (f64::from(*w), w.to_string()))
        .collect();
    let aria = format!("requests per second against workers, {scenario}");
    Some(charts::lines(
        &series,
        &systems,
        ("workers", "requests/s"),
        &xs,
        &aria,
    ))
}

/// CPU µs per request by scenario, the systems side by side, at the smallest worker count:
/// one chart per decade of CPU per request, so that a scenario of a millisecond does not
/// flatten those of microseconds. Returns each chart's title and SVG.
pub fn cpu_charts(summaries: &[Summary]) -> Vec<(String, String)> {
    let systems = systems_of(summaries);
    let fewest = at_fewest_workers(summaries);
    let mut decades: Vec<(i32, Vec<Group>)> = Vec::new();
    for scenario in scenarios_of(summaries) {
        let rows: Vec<&&Summary> = fewest.iter().filter(|s| s.scenario == scenario).collect();
        let largest = rows
            .iter()
            .filter_map(|s| s.cpu_us.map(|c| c.median))
            .fold(0.0, f64::max);
        if largest <= 0.0 {
            continue;
        }
        let decade = largest.log10().floor() as i32;
        let bars: Vec<Bar> = rows
            .iter()
            .map(|s| bar(s, s.cpu_us.map(|c| c.median)))
            .collect();
        match decades.iter_mut().find(|(d, _)| *d == decade) {
            Some((_, groups)) => groups.push((scenario.to_owned(), bars)),
            None => decades.push((decade, vec![(scenario.to_owned(), bars)])),
        }
    }
    decades.sort_by_key(|(d, _)| *d);
    decades
        .into_iter()
        .map(|(decade, groups)| {
            let (low, high) = (10f64.powi(decade), 10f64.powi(decade + 1));
            let title = format!("scenarios of {low} to {high} µs per request");
            let svg = charts::bars(&groups, &systems, "CPU µs per request", None);
            (title, svg)
        })
        .collect()
}

/// Each system's CPU per request over nginx's by scenario (the bar the performance work is
/// measured by), with nginx's 1.0 drawn.
pub fn ratio_chart(summaries: &[Summary]) -> Option<String> {
    let systems: Vec<String> = systems_of(summaries)
        .into_iter()
        .filter(|s| s != "nginx")
        .collect();
    let fewest = at_fewest_workers(summaries);
    let groups: Vec<Group> = scenarios_of(summaries)
        .into_iter()
        .map(|scenario| {
            let nginx = fewest
                .iter()
                .find(|s| s.scenario == scenario && s.system == "nginx");
            let bars = fewest
                .iter()
                .filter(|s| s.scenario == scenario && s.system != "nginx")
                .map(|s| match nginx.and_then(|n| n.cpu_us) {
                    Some(_) => bar(s, ratio_to_nginx(summaries, s)),
                    None => {
                        let why = nginx
                            .and_then(|n| n.failure.as_deref())
                            .and_then(not_applicable)
                            .map_or_else(
                                || "no nginx figure".to_owned(),
                                |w| format!("nginx: {w}"),
                            );
                        (s.system.clone(), Err(why))
                    }
                })
                .collect();
            (scenario.to_owned(), bars)
        })
        .collect();
    (!systems.is_empty() && summaries.iter().any(|s| s.system == "nginx")).then(|| {
        charts::bars(
            &groups,
            &systems,
            "CPU per request / nginx's",
            Some((1.0, "nginx = 1.0")),
        )
    })
}

/// Estimated max requests/s per dollar-hour per instance family (its best size) of the
/// architecture the records were measured on, per system, for one scenario, from the sweep
/// of its records.
pub fn per_dollar_chart(
    records: &[RunRecord],
    scenario: &str,
    catalog: &[Priced],
) -> Option<String> {
    let systems: Vec<String> = systems_of(&summarize(records));
    let (catalog, _) = crate::run::of_architecture(catalog, crate::run::architecture(records));
    let families = crate::data::families_of(catalog.iter().copied());
    let mut groups: Vec<Group> = families
        .iter()
        .map(|f| ((*f).to_owned(), Vec::new()))
        .collect();
    let mut any = false;
    for system in &systems {
        let Ok(sweep) = Sweep::from_records(records, Some(system), Some(scenario)) else {
            continue;
        };
        for (family, bars) in groups.iter_mut() {
            let best = catalog
                .iter()
                .filter(|p| crate::data::family(&p.instance) == family)
                .map(|p| sweep.max_rps(p.vcpus) / p.usd_per_hour)
                .fold(0.0, f64::max);
            bars.push((system.clone(), Ok(best)));
            any = true;
        }
    }
    any.then(|| charts::bars(&groups, &systems, "max requests/s per $/hour", None))
}

/// The seeds' own chart: the cheapest fleet's price per hour (any family, the seeds' three
/// nodes at 66%) against the target total requests/s, per system, for one scenario.
pub fn price_per_target_chart(
    records: &[RunRecord],
    scenario: &str,
    catalog: &[Priced],
) -> Option<String> {
    use crate::model::{cheapest, families, Instance, Nodes, Policy};
    let systems: Vec<String> = systems_of(&summarize(records));
    let (catalog, _) = crate::run::of_architecture(catalog, crate::run::architecture(records));
    let targets = crate::size::SEED_TARGETS;
    let mut series = Vec::new();
    for system in &systems {
        let Ok(sweep) = Sweep::from_records(records, Some(system), Some(scenario)) else {
            continue;
        };
        let instances: Vec<Instance> = catalog
            .iter()
            .map(|p| Instance {
                name: p.instance.clone(),
                vcpus: p.vcpus,
                max_rps: sweep.max_rps(p.vcpus),
                ssl_tps: None,
                usd_per_hour: p.usd_per_hour,
            })
            .collect();
        let points: Vec<(f64, f64)> = targets
            .iter()
            .filter_map(|&t| {
                families(&instances)
                    .iter()
                    .filter_map(|f| cheapest(&instances, f, &Policy::SEEDS, Nodes::Fixed, t))
                    .map(|fleet| fleet.usd_per_hour)
                    .reduce(f64::min)
                    .map(|usd| (t, usd))
            })
            .collect();
        series.push((system.clone(), points));
    }
    if series.iter().all(|(_, p)| p.is_empty()) {
        return None;
    }
    let xs: Vec<(f64, String)> = [25_000.0, 100_000.0, 200_000.0, 320_000.0]
        .into_iter()
        .map(|t| (t, charts::tick(t, 1000.0)))
        .collect();
    let aria = format!("cheapest fleet per hour against target requests/s, {scenario}");
    Some(charts::lines(
        &series,
        &systems,
        ("target requests/s (3 nodes at 66%)", "$ per hour"),
        &xs,
        &aria,
    ))
}

/// The whole report: summary table, the charts, and the method.
pub fn html(records: &[RunRecord], catalog: Option<&[Priced]>, method: &str) -> String {
    let summaries = summarize(records);
    let mut out = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>portcullis-bench run</title>\
         <style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:3px 8px}td.n{text-align:right}\
         td.bad{background:#fdd}td.na{color:#777}svg{display:block;margin:0.5em 0 1.5em}\
         </style></head><body>\n<h1>portcullis-bench run</h1>\n",
    );
    let _ = writeln!(out, "<p>{}</p>", escape(method));
    out.push_str(
        "<table><tr><th>scenario</th><th>system</th><th>workers</th><th>req/s</th><th>±</th>\
         <th>p99 ms</th><th>CPU µs/req</th><th>kernel</th><th>req/s per core</th>\
         <th>syscalls/req</th>\
         <th>vs nginx</th><th>errors</th></tr>\n",
    );
    for s in &summaries {
        let na = s.failure.as_deref().and_then(not_applicable);
        let (class, errors) = match (&na, &s.failure) {
            (Some(why), _) if s.good_runs == 0 => {
                (" class=\"na\"", format!("not applicable: {why}"))
            }
            (_, Some(f)) if s.good_runs == 0 => (" class=\"bad\"", format!("failed: {f}")),
            _ if s.errors > 0 => (" class=\"bad\"", s.errors.to_string()),
            _ => ("", s.errors.to_string()),
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td{class}>{}</td></tr>",
            escape(&s.scenario),
            escape(&s.system),
            s.workers,
            opt(s.requests_per_s.map(|r| r.median), 0),
            s.requests_per_s.map_or_else(
                || "-".to_owned(),
                |r| format!("{:.1}%", r.relative() * 100.0)
            ),
            opt(s.latency_p99_ms.map(|r| r.median), 2),
            opt(s.cpu_us.map(|r| r.median), 2),
            percent(s.kernel_share),
            opt(s.per_core(), 0),
            opt(s.syscalls_per_request, 1),
            opt(ratio_to_nginx(&summaries, s), 2),
            escape(&errors)
        );
    }
    out.push_str("</table>\n");
    if let Some(chart) = ratio_chart(&summaries) {
        out.push_str("<h2>CPU per request against nginx's</h2>\n");
        out.push_str(&chart);
    }
    for (title, chart) in cpu_charts(&summaries) {
        let _ = writeln!(out, "<h2>CPU per request: {}</h2>", escape(&title));
        out.push_str(&chart);
    }
    for scenario in scenarios_of(&summaries) {
        if let Some(chart) = sweep_chart(&summaries, scenario) {
            let _ = writeln!(
                out,
                "\n<h2>{}: requests/s against workers</h2>",
                escape(scenario)
            );
            out.push_str(&chart);
        }
        let Some(catalog) = catalog else {
            continue;
        };
        if let Some(chart) = per_dollar_chart(records, scenario, catalog) {
            let _ = writeln!(
                out,
                "\n<h2>{}: requests/s per dollar, by family</h2>",
                escape(scenario)
            );
            out.push_str(&chart);
        }
        if let Some(chart) = price_per_target_chart(records, scenario, catalog) {
            let _ = writeln!(
                out,
                "\n<h3>{}: price of the cheapest fleet per target</h3>",
                escape(scenario)
            );
            out.push_str(&chart);
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
    fn kernel_share_is_over_the_runs_that_measured_it() {
        let mut runs = vec![
            record("nginx", 1, 1, 1000.0, 1.0),
            record("nginx", 1, 2, 1000.0, 3.0),
            record("nginx", 1, 3, 1000.0, 4.0),
        ];
        runs[0].cpu_system_s = Some(0.5);
        runs[1].cpu_system_s = Some(2.5);
        let all = summarize(&runs);
        // 3 kernel seconds of 4 measured; the third run has no split.
        assert_eq!(all[0].kernel_share, Some(0.75));
        assert!(text_table(&all).contains(" 75% "), "{}", text_table(&all));
        assert!(csv(&runs).lines().nth(1).unwrap().ends_with(",0.5"));
        assert_eq!(summarize(&runs[2..])[0].kernel_share, None);
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
            text.ends_with(",\"HAProxy does not serve files\",\n"),
            "{text}"
        );
    }

    #[test]
    fn html_has_the_charts() {
        let page = html(&records(), None, "method <here>");
        assert!(page.contains("method &lt;here&gt;"));
        // The ratio to nginx, one CPU chart (one decade), the sweep (two worker counts).
        assert_eq!(page.matches("<svg").count(), 3, "{page}");
        assert!(page.contains("<polyline"), "the nginx sweep has two points");
        assert!(page.contains("<title>web-1k portcullis:"));
        assert!(page.contains("class=\"na\">not applicable: HAProxy serves no files"));
        assert!(page.contains("nginx = 1.0"));
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
        // One bar per family and system.
        assert!(chart.contains("<title>c5 nginx:"), "{chart}");
        assert_eq!(chart.matches("<title>c5 ").count(), 2, "{chart}");
        let prices = price_per_target_chart(&records(), "web-1k", &catalog).unwrap();
        assert!(prices.contains("<polyline"), "{prices}");
    }
}
