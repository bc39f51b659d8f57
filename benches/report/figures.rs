//! The report's figures: a key, its value, a target and a line on what it is, kept in the
//! order they were measured so that the table reads as the run went, and written flat and
//! sorted for the JSON, so that two runs' JSON files diff key by key.

use std::collections::BTreeMap;

/// The report's figures, in insertion order for the table, flat for the JSON.
#[derive(Default)]
pub struct Figures {
    rows: Vec<(String, f64, String, String)>,
    /// Facts that are not numbers (versions), printed above the table and kept in the JSON.
    notes: Vec<(String, String)>,
}

impl Figures {
    pub fn note(&mut self, key: &str, value: &str) {
        eprintln!("  {key} = {value}");
        self.notes.push((key.to_string(), value.to_string()));
    }

    pub fn put(&mut self, key: &str, value: f64, target: &str, what: &str) {
        eprintln!("  {key} = {value:.3}");
        self.rows
            .push((key.to_string(), value, target.to_string(), what.to_string()));
    }

    /// The value put under `key`, for a figure taken over another of the same run.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.rows.iter().find(|r| r.0 == key).map(|r| r.1)
    }

    pub fn json(&self) -> String {
        let map: BTreeMap<&str, f64> = self
            .rows
            .iter()
            .map(|(k, v, _, _)| (k.as_str(), *v))
            .collect();
        let body: Vec<String> = map
            .iter()
            .map(|(k, v)| {
                if v.is_finite() {
                    format!("  \"{k}\": {v:.4}")
                } else {
                    format!("  \"{k}\": null")
                }
            })
            .chain(
                self.notes
                    .iter()
                    .map(|(k, v)| format!("  \"{k}\": \"{}\"", v.replace('"', "'"))),
            )
            .collect();
        format!("{{\n{}\n}}\n", body.join(",\n"))
    }

    pub fn markdown(&self) -> String {
        let mut out: String = self
            .notes
            .iter()
            .filter(|(k, _)| !k.starts_with("servers."))
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("| key | value | target | what |\n| --- | ---: | --- | --- |\n");
        // The servers section prints its own table, a column per server.
        for (k, v, target, what) in self.rows.iter().filter(|r| !r.0.starts_with("servers.")) {
            out.push_str(&format!(
                "| `{k}` | {} | {target} | {what} |\n",
                format_value(*v)
            ));
        }
        out
    }
}

pub fn format_value(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
