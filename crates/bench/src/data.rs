//! The two CSV files `size` reads: measured instances (`instance,vcpus,max_rps`) and the
//! instance catalog (`instance,vcpus,usd,per,source`).
//!
//! The files are small and written by hand, so the reader is too: one record a line, fields
//! split at commas, `#` lines and blank lines skipped, the first other line the header. A
//! field may be double-quoted to hold a comma. Every error names the file and line.

use std::fmt;
use std::path::Path;

/// Hours in a month, as the seeds and AWS's price pages count them (365 * 24 / 12).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// A data file error: what is wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataError {
    pub message: String,
    pub file: String,
    /// 1-based line; 0 for an error about the file as a whole.
    pub line: usize,
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{} in {}", self.message, self.file)
        } else {
            write!(f, "{} in {}:{}", self.message, self.file, self.line)
        }
    }
}

impl std::error::Error for DataError {}

/// One instance type as measured: its name (`family.size`), vCPUs and the maximum requests
/// per second one instance served.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub instance: String,
    pub vcpus: u32,
    pub max_rps: f64,
    /// New TLS connections per second (`ssl_tps`, the seeds' SSL TPS), when measured.
    pub ssl_tps: Option<f64>,
    /// Line in the measured file, for errors found when the catalog is joined.
    pub line: usize,
}

/// One instance type for sale: vCPUs, price and where the price comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Priced {
    pub instance: String,
    pub vcpus: u32,
    pub usd_per_hour: f64,
    pub source: String,
}

/// The family of an instance type: the name before the first dot (`m5a` for `m5a.large`).
pub fn family(instance: &str) -> &str {
    instance.split('.').next().unwrap_or(instance)
}

/// The families of `instances`, each once, in the order they first appear.
pub fn families_of<'a>(instances: impl IntoIterator<Item = &'a Priced>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for p in instances {
        let f = family(&p.instance);
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// Reads a measured-instances file: header `instance,vcpus,max_rps`, or
/// `instance,vcpus,max_rps,ssl_tps` with the SSL TPS of each too.
pub fn parse_measured(text: &str, file: &str) -> Result<Vec<Measured>, DataError> {
    let with_tps = ["instance", "vcpus", "max_rps", "ssl_tps"];
    let header =
        |l: &str| split(l).is_ok_and(|f| f.len() == 4 && f[3].eq_ignore_ascii_case("ssl_tps"));
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    let tps = first.is_some_and(header);
    let rows = Rows::new(text, file, if tps { &with_tps } else { &with_tps[..3] })?;
    let mut out: Vec<Measured> = Vec::new();
    for row in rows {
        let row = row?;
        let instance = row.name(0)?;
        if out.iter().any(|m| m.instance == instance) {
            return Err(row.error(format!("duplicate instance \"{instance}\"")));
        }
        out.push(Measured {
            instance,
            vcpus: row.vcpus(1)?,
            max_rps: row.positive(2, "max_rps")?,
            ssl_tps: if tps {
                Some(row.positive(3, "ssl_tps")?)
            } else {
                None
            },
            line: row.line,
        });
    }
    if out.is_empty() {
        return Err(whole_file(file, "no instances"));
    }
    Ok(out)
}

/// Reads an instance catalog: header `instance,vcpus,usd,per,source`, where `per` is
/// `hour` or `month` ([`HOURS_PER_MONTH`] hours).
pub fn parse_catalog(text: &str, file: &str) -> Result<Vec<Priced>, DataError> {
    let rows = Rows::new(text, file, &["instance", "vcpus", "usd", "per", "source"])?;
    let mut out: Vec<Priced> = Vec::new();
    for row in rows {
        let row = row?;
        let instance = row.name(0)?;
        if out.iter().any(|p| p.instance == instance) {
            return Err(row.error(format!("duplicate instance \"{instance}\"")));
        }
        let usd = row.positive(2, "usd")?;
        let usd_per_hour = match row.fields[3].as_str() {
            "hour" => usd,
            "month" => usd / HOURS_PER_MONTH,
            other => {
                return Err(row.error(format!(
                    "invalid per \"{other}\", expected \"hour\" or \"month\""
                )))
            }
        };
        out.push(Priced {
            instance,
            vcpus: row.vcpus(1)?,
            usd_per_hour,
            source: row.fields[4].clone(),
        });
    }
    if out.is_empty() {
        return Err(whole_file(file, "no instances"));
    }
    Ok(out)
}

/// Reads a file for the parsers above, naming it by its path in errors.
pub fn read(path: &Path) -> Result<String, DataError> {
    std::fs::read_to_string(path)
        .map_err(|e| whole_file(&path.display().to_string(), &e.to_string()))
}

fn whole_file(file: &str, message: &str) -> DataError {
    DataError {
        message: message.to_owned(),
        file: file.to_owned(),
        line: 0,
    }
}

/// The data lines of a file after its header, each split into as many fields as the header.
struct Rows<'a> {
    lines: std::iter::Enumerate<std::str::Lines<'a>>,
    file: &'a str,
    width: usize,
}

struct Row<'a> {
    fields: Vec<String>,
    file: &'a str,
    line: usize,
}

impl<'a> Rows<'a> {
    fn new(text: &'a str, file: &'a str, header: &[&str]) -> Result<Rows<'a>, DataError> {
        let mut rows = Rows {
            lines: text.lines().enumerate(),
            file,
            width: header.len(),
        };
        let Some((line, first)) = rows.next_data_line() else {
            return Err(whole_file(file, "no header line"));
        };
        let found = split(first).map_err(|m| rows.error(line, m))?;
        if found
            .iter()
            .map(|f| f.to_ascii_lowercase())
            .ne(header.iter().map(|h| h.to_string()))
        {
            return Err(rows.error(line, format!("header must be \"{}\"", header.join(","))));
        }
        Ok(rows)
    }

    fn next_data_line(&mut self) -> Option<(usize, &'a str)> {
        self.lines
            .by_ref()
            .map(|(i, l)| (i + 1, l.trim()))
            .find(|(_, l)| !l.is_empty() && !l.starts_with('#'))
    }

    fn error(&self, line: usize, message: String) -> DataError {
        DataError {
            message,
            file: self.file.to_owned(),
            line,
        }
    }
}

impl<'a> Iterator for Rows<'a> {
    type Item = Result<Row<'a>, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (line, text) = self.next_data_line()?;
        let fields = match split(text) {
            Ok(fields) => fields,
            Err(m) => return Some(Err(self.error(line, m))),
        };
        if fields.len() != self.width {
            let message = format!("{} fields, expected {}", fields.len(), self.width);
            return Some(Err(self.error(line, message)));
        }
        Some(Ok(Row {
            fields,
            file: self.file,
            line,
        }))
    }
}

impl Row<'_> {
    fn error(&self, message: String) -> DataError {
        DataError {
            message,
            file: self.file.to_owned(),
            line: self.line,
        }
    }

    /// An instance name, compared without regard to case (the seeds write `M5.Large`).
    fn name(&self, i: usize) -> Result<String, DataError> {
        let name = self.fields[i].to_ascii_lowercase();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(self.error(format!("invalid instance name \"{}\"", self.fields[i])));
        }
        Ok(name)
    }

    fn vcpus(&self, i: usize) -> Result<u32, DataError> {
        match self.fields[i].parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(self.error(format!("invalid vcpus \"{}\"", self.fields[i]))),
        }
    }

    fn positive(&self, i: usize, what: &str) -> Result<f64, DataError> {
        match self.fields[i].parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
            _ => Err(self.error(format!("invalid {what} \"{}\"", self.fields[i]))),
        }
    }
}

/// Splits one line at commas; a field wholly in double quotes may hold commas, and `""`
/// inside it is one quote. Fields are trimmed.
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        rest = rest.trim_start();
        let field;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) if quoted[i + 1..].starts_with('"') => {
                        value.push('"');
                        chars.next();
                    }
                    Some((i, '"')) => break i + 1,
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated quoted field".to_owned()),
                }
            };
            field = value;
            rest = quoted[end..].trim_start();
            if !rest.is_empty() && !rest.starts_with(',') {
                return Err("unexpected text after a quoted field".to_owned());
            }
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            field = rest[..end].trim_end().to_owned();
            rest = &rest[end..];
        }
        fields.push(field);
        match rest.strip_prefix(',') {
            Some(after) => rest = after,
            None => return Ok(fields),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_file_with_comments_and_case() {
        let text = "# seed 000\ninstance,vcpus,max_rps\n\nM5.Large, 2, 33774\n# note\nm5.xlarge,4,74151.5\n";
        let rows = parse_measured(text, "m.csv").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].instance, "m5.large");
        assert_eq!(rows[0].line, 4);
        assert_eq!(rows[1].max_rps, 74151.5);
    }

    #[test]
    fn errors_name_file_and_line() {
        let bad = "instance,vcpus,max_rps\na1.large,2,0\n";
        assert_eq!(
            parse_measured(bad, "m.csv").unwrap_err().to_string(),
            "invalid max_rps \"0\" in m.csv:2"
        );
        let short = "instance,vcpus,max_rps\n\na1.large,2\n";
        assert_eq!(
            parse_measured(short, "m.csv").unwrap_err().to_string(),
            "2 fields, expected 3 in m.csv:3"
        );
        let header = "# c\ninstance,cpus,max_rps\n";
        assert_eq!(
            parse_measured(header, "m.csv").unwrap_err().to_string(),
            "header must be \"instance,vcpus,max_rps\" in m.csv:2"
        );
        let dup = "instance,vcpus,max_rps\na1.large,2,1\nA1.LARGE,2,1\n";
        assert_eq!(
            parse_measured(dup, "m.csv").unwrap_err().to_string(),
            "duplicate instance \"a1.large\" in m.csv:3"
        );
        assert_eq!(
            parse_measured("# only\n", "m.csv").unwrap_err().to_string(),
            "no header line in m.csv"
        );
        assert_eq!(
            parse_measured("instance,vcpus,max_rps\n", "m.csv")
                .unwrap_err()
                .to_string(),
            "no instances in m.csv"
        );
    }

    #[test]
    fn catalog_prices_per_hour_and_month() {
        let text = "instance,vcpus,usd,per,source\na1.large,2,0.051,hour,\"seed 000, Table 5\"\nc5n.large,2,73,month,seed 003\n";
        let rows = parse_catalog(text, "c.csv").unwrap();
        assert_eq!(rows[0].source, "seed 000, Table 5");
        assert_eq!(rows[0].usd_per_hour, 0.051);
        assert!((rows[1].usd_per_hour - 0.1).abs() < 1e-12);
        let bad = "instance,vcpus,usd,per,source\na1.large,2,0.051,day,x\n";
        assert_eq!(
            parse_catalog(bad, "c.csv").unwrap_err().to_string(),
            "invalid per \"day\", expected \"hour\" or \"month\" in c.csv:2"
        );
    }

    #[test]
    fn quoted_fields() {
        assert_eq!(
            split(r#"a, "b, ""c""" ,d"#).unwrap(),
            ["a", "b, \"c\"", "d"]
        );
        assert_eq!(split("a,,b").unwrap(), ["a", "", "b"]);
        assert!(split("\"open").is_err());
        assert!(split("\"a\" b").is_err());
    }

    #[test]
    fn family_is_the_name_before_the_dot() {
        assert_eq!(family("m5a.2xlarge"), "m5a");
        assert_eq!(family("custom"), "custom");
    }
}
