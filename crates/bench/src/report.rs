//! Tables and their four renderings: aligned text, CSV, Markdown and a self-contained HTML
//! page.
//!
//! A cell keeps two texts: `text` for people (`16,089`) and `plain` for machines (`16089`),
//! which CSV uses. A table may mark cells (the seeds colour the cheapest cell of a row
//! green): text marks them with `*`, Markdown in bold, HTML with a green background, and
//! CSV in one extra column naming the marked columns of the row.

use std::fmt::Write;

/// An output format of `size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Csv,
    Markdown,
    Html,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub text: String,
    pub plain: String,
    /// Numbers are right-aligned.
    pub numeric: bool,
    pub marked: bool,
}

impl Cell {
    pub fn text(text: impl Into<String>) -> Cell {
        let text = text.into();
        Cell {
            plain: text.clone(),
            text,
            numeric: false,
            marked: false,
        }
    }

    /// A count or rate: thousands separated, at most `decimals` decimals, trailing zeros off.
    pub fn number(value: f64, decimals: usize) -> Cell {
        let plain = trim_zeros(format!("{value:.decimals$}"), 0);
        Cell {
            text: thousands(&plain),
            plain,
            numeric: true,
            marked: false,
        }
    }

    /// Dollars: up to four decimals, at least two, as the seeds print prices.
    pub fn usd(value: f64) -> Cell {
        let plain = trim_zeros(format!("{value:.4}"), 2);
        Cell {
            text: plain.clone(),
            plain,
            numeric: true,
            marked: false,
        }
    }

    /// Dollars to the cent, thousands separated: monthly figures.
    pub fn cents(value: f64) -> Cell {
        let plain = format!("{value:.2}");
        Cell {
            text: thousands(&plain),
            plain,
            numeric: true,
            marked: false,
        }
    }

    pub fn marked(mut self, marked: bool) -> Cell {
        self.marked = marked;
        self
    }
}

/// Drops trailing zeros after the decimal point, keeping at least `keep` decimals.
fn trim_zeros(mut s: String, keep: usize) -> String {
    let Some(dot) = s.find('.') else { return s };
    let min_len = if keep == 0 { dot } else { dot + 1 + keep };
    while s.len() > min_len && (s.ends_with('0') || s.ends_with('.')) {
        s.pop();
    }
    s
}

/// `1234567.5` -> `1,234,567.5`.
fn thousands(plain: &str) -> String {
    let (sign, rest) = plain.strip_prefix('-').map_or(("", plain), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut out = String::from(sign);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(frac) = frac {
        out.push('.');
        out.push_str(frac);
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// What a marked cell means (`cheapest in row`), when the table marks any.
    pub mark: Option<String>,
    /// Sentences printed under the table (cells a source prints otherwise, and why).
    pub footnotes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub title: String,
    /// Sentences printed before the tables: the policy, assumptions, exceptions.
    pub notes: Vec<String>,
    pub tables: Vec<Table>,
}

impl Report {
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Text => self.text(),
            Format::Csv => self.csv(),
            Format::Markdown => self.markdown(),
            Format::Html => self.html(),
        }
    }

    fn text(&self) -> String {
        let mut out = format!("{}\n", self.title);
        for note in &self.notes {
            let _ = writeln!(out, "{note}");
        }
        for table in &self.tables {
            let _ = writeln!(out, "\n{}", table.title);
            let marks = table.mark.is_some();
            let cells: Vec<Vec<String>> = table
                .rows
                .iter()
                .map(|row| {
                    row.iter()
                        .map(|c| match (marks, c.marked) {
                            (true, true) => format!("{}*", c.text),
                            (true, false) => format!("{} ", c.text),
                            (false, _) => c.text.clone(),
                        })
                        .collect()
                })
                .collect();
            let widths: Vec<usize> = (0..table.header.len())
                .map(|i| {
                    let body = cells
                        .iter()
                        .filter_map(|r| r.get(i))
                        .map(|c| c.chars().count());
                    body.chain([table.header[i].chars().count()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let right = |i: usize| {
                table
                    .rows
                    .first()
                    .and_then(|r| r.get(i))
                    .is_some_and(|c| c.numeric)
            };
            let line = |texts: &[String]| {
                let padded: Vec<String> = texts
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let w = widths[i];
                        if right(i) {
                            format!("{t:>w$}")
                        } else {
                            format!("{t:<w$}")
                        }
                    })
                    .collect();
                padded.join("  ").trim_end().to_owned()
            };
            let _ = writeln!(out, "{}", line(&table.header));
            for row in &cells {
                let _ = writeln!(out, "{}", line(row));
            }
            if let Some(mark) = &table.mark {
                let _ = writeln!(out, "* {mark}");
            }
            for note in &table.footnotes {
                let _ = writeln!(out, "{note}");
            }
        }
        out
    }

    fn csv(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# {}", self.title);
        for note in &self.notes {
            let _ = writeln!(out, "# {note}");
        }
        for table in &self.tables {
            let _ = writeln!(out, "\n# {}", table.title);
            let mut header: Vec<&str> = table.header.iter().map(String::as_str).collect();
            if let Some(mark) = &table.mark {
                header.push(mark);
            }
            let _ = writeln!(out, "{}", csv_line(header));
            for row in &table.rows {
                let mut fields: Vec<&str> = row.iter().map(|c| c.plain.as_str()).collect();
                let marked: Vec<&str> = row
                    .iter()
                    .zip(&table.header)
                    .filter(|(c, _)| c.marked)
                    .map(|(_, h)| h.as_str())
                    .collect();
                let marked = marked.join(" ");
                if table.mark.is_some() {
                    fields.push(&marked);
                }
                let _ = writeln!(out, "{}", csv_line(fields));
            }
            for note in &table.footnotes {
                let _ = writeln!(out, "# {note}");
            }
        }
        out
    }

    fn markdown(&self) -> String {
        let mut out = format!("# {}\n\n", self.title);
        for note in &self.notes {
            let _ = writeln!(out, "{note}\n");
        }
        for table in &self.tables {
            let _ = writeln!(out, "## {}\n", table.title);
            let _ = writeln!(out, "| {} |", table.header.join(" | "));
            let aligns: Vec<&str> = (0..table.header.len())
                .map(|i| match table.rows.first().and_then(|r| r.get(i)) {
                    Some(c) if c.numeric => "---:",
                    _ => "---",
                })
                .collect();
            let _ = writeln!(out, "|{}|", aligns.join("|"));
            for row in &table.rows {
                let texts: Vec<String> = row
                    .iter()
                    .map(|c| {
                        if c.marked {
                            format!("**{}**", c.text)
                        } else {
                            c.text.clone()
                        }
                    })
                    .collect();
                let _ = writeln!(out, "| {} |", texts.join(" | "));
            }
            if let Some(mark) = &table.mark {
                let _ = writeln!(out, "\n**Bold**: {mark}.");
            }
            for note in &table.footnotes {
                let _ = writeln!(out, "\n{note}");
            }
            out.push('\n');
        }
        out
    }

    fn html(&self) -> String {
        let mut out =
            String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        let _ = writeln!(out, "<title>{}</title>", escape(&self.title));
        out.push_str(
            "<style>\nbody{font-family:sans-serif;margin:2em}\n\
             table{border-collapse:collapse;margin:1em 0}\n\
             caption{font-weight:bold;text-align:left;padding:.3em 0}\n\
             th,td{border:1px solid #bbb;padding:.25em .6em}\n\
             th{background:#eee}\ntd.n{text-align:right;font-variant-numeric:tabular-nums}\n\
             td.mark{background:#9be29b;font-weight:bold}\n</style>\n</head>\n<body>\n",
        );
        let _ = writeln!(out, "<h1>{}</h1>", escape(&self.title));
        for note in &self.notes {
            let _ = writeln!(out, "<p>{}</p>", escape(note));
        }
        for table in &self.tables {
            let _ = writeln!(out, "<table>\n<caption>{}</caption>", escape(&table.title));
            out.push_str("<tr>");
            for h in &table.header {
                let _ = write!(out, "<th>{}</th>", escape(h));
            }
            out.push_str("</tr>\n");
            for row in &table.rows {
                out.push_str("<tr>");
                for c in row {
                    let class = match (c.numeric, c.marked) {
                        (true, true) => " class=\"n mark\"",
                        (true, false) => " class=\"n\"",
                        (false, true) => " class=\"mark\"",
                        (false, false) => "",
                    };
                    let _ = write!(out, "<td{class}>{}</td>", escape(&c.text));
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</table>\n");
            if let Some(mark) = &table.mark {
                let _ = writeln!(out, "<p>Green: {}.</p>", escape(mark));
            }
            for note in &table.footnotes {
                let _ = writeln!(out, "<p>{}</p>", escape(note));
            }
        }
        out.push_str("</body>\n</html>\n");
        out
    }
}

fn csv_line<'a>(fields: impl IntoIterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = fields
        .into_iter()
        .map(|f| {
            if f.contains([',', '"', '\n']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f.to_owned()
            }
        })
        .collect();
    quoted.join(",")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        Report {
            title: "T".into(),
            notes: vec!["n <1>".into()],
            tables: vec![Table {
                title: "prices".into(),
                header: vec!["Total RPS".into(), "a $/hr".into(), "b $/hr".into()],
                rows: vec![
                    vec![
                        Cell::number(1000.0, 0),
                        Cell::usd(0.153).marked(true),
                        Cell::usd(0.51),
                    ],
                    vec![
                        Cell::number(25000.0, 0),
                        Cell::text("none fits"),
                        Cell::usd(1.0).marked(true),
                    ],
                ],
                mark: Some("cheapest in row".into()),
                footnotes: Vec::new(),
            }],
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(Cell::number(10618.74, 2).text, "10,618.74");
        assert_eq!(Cell::number(10618.7400001, 2).plain, "10618.74");
        assert_eq!(Cell::number(333.3333, 0).text, "333");
        assert_eq!(Cell::number(1_234_567.5, 1).text, "1,234,567.5");
        assert_eq!(Cell::number(450308.0, 2).text, "450,308");
        assert_eq!(Cell::usd(0.153).text, "0.153");
        assert_eq!(Cell::usd(3.0 * 0.17).text, "0.51");
        assert_eq!(Cell::usd(1.0).text, "1.00");
        assert_eq!(Cell::usd(0.2505).text, "0.2505");
        assert_eq!(Cell::cents(1349.04).text, "1,349.04");
        assert_eq!(Cell::cents(124.1).text, "124.10");
    }

    #[test]
    fn text_marks_and_aligns() {
        let text = sample().render(Format::Text);
        let expected = "T\nn <1>\n\nprices\nTotal RPS      a $/hr  b $/hr\n   1,000       0.153*   0.51\n  25,000   none fits    1.00*\n* cheapest in row\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn csv_names_the_marked_columns() {
        let csv = sample().render(Format::Csv);
        assert!(csv.contains("Total RPS,a $/hr,b $/hr,cheapest in row\n1000,0.153,0.51,a $/hr\n25000,none fits,1.00,b $/hr\n"), "{csv}");
    }

    #[test]
    fn markdown_bolds_marks() {
        let md = sample().render(Format::Markdown);
        assert!(
            md.contains("|---:|---:|---:|\n| 1,000 | **0.153** | 0.51 |"),
            "{md}"
        );
    }

    #[test]
    fn html_is_escaped_and_self_contained() {
        let html = sample().render(Format::Html);
        assert!(html.contains("<p>n &lt;1&gt;</p>"));
        assert!(html.contains("<td class=\"n mark\">0.153</td>"));
        assert!(!html.contains("http"), "no external resources");
        assert!(html.ends_with("</html>\n"));
    }
}
