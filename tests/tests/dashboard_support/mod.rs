//! What the dashboard tests share (`target_dashboard.rs` for the target, `host_dashboard.rs` for the host): a
//! Prometheus exposition's metric and label names, the metrics and labels a Grafana dashboard's queries use, and the
//! problems of one against the other.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Labels Prometheus adds at scrape time.
pub const SCRAPE_LABELS: [&str; 2] = ["instance", "job"];

/// Metric sample names of a scrape, each with the label names seen on any of its series.
pub type Exported = BTreeMap<String, BTreeSet<String>>;

/// The label names inside one `{...}` of a sample line or a PromQL selector (values may hold `,`, `=` or `}`).
pub fn label_names(inner: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = inner;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        let Some(op) = rest.find(['=', '!']) else { break };
        names.insert(rest[..op].trim().to_owned());
        let Some(open) = rest.find('"') else { break };
        // Skip the quoted value, honouring backslash escapes.
        let mut escaped = false;
        let mut end = None;
        for (i, c) in rest[open + 1..].char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(open + 1 + i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let Some(end) = end else { break };
        rest = &rest[end + 1..];
    }
    names
}

/// Parse a Prometheus text exposition into sample names and their label names.
pub fn exported(body: &str) -> Exported {
    let mut out = Exported::new();
    for line in body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let close = line.rfind('}').expect("closing brace");
            labels.extend(label_names(&line[name_end + 1..close]));
        }
    }
    out
}

/// One metric use in a query: the metric token and the label names its selector matches on.
#[derive(Debug)]
pub struct Use {
    pub metric: String,
    pub selector_labels: BTreeSet<String>,
}

/// Every `PREFIX*` token (`nvmf_target_`) of a PromQL expression with its selector's label names, and the
/// expression's grouping labels (`by (...)`).
pub fn parse_expr(expr: &str, prefix: &str) -> (Vec<Use>, BTreeSet<String>) {
    let mut uses = Vec::new();
    let mut at = 0;
    while let Some(pos) = expr[at..].find(prefix) {
        let start = at + pos;
        let len = expr[start..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(expr.len() - start);
        let metric = expr[start..start + len].to_owned();
        let mut selector_labels = BTreeSet::new();
        at = start + len;
        if expr[at..].starts_with('{') {
            let close = at + expr[at..].find('}').expect("selector closes");
            selector_labels = label_names(&expr[at + 1..close]);
            at = close + 1;
        }
        uses.push(Use { metric, selector_labels });
    }
    let mut grouping = BTreeSet::new();
    let mut rest = expr;
    while let Some(pos) = rest.find("by (") {
        let inner = &rest[pos + 4..];
        let close = inner.find(')').expect("by (...) closes");
        grouping.extend(inner[..close].split(',').map(|l| l.trim().to_owned()).filter(|l| !l.is_empty()));
        rest = &inner[close..];
    }
    (uses, grouping)
}

/// Every query of the dashboard: (where, expression, labels a `label_values` asks for).
pub fn queries(dashboard: &Value) -> Vec<(String, String, BTreeSet<String>)> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_default().to_owned();
            out.push((format!("panel {:?}", p["title"].as_str().unwrap_or_default()), expr, BTreeSet::new()));
        }
    }
    for v in dashboard["templating"]["list"].as_array().expect("templating list") {
        let q = v["query"]["query"].as_str().or_else(|| v["query"].as_str()).unwrap_or_default();
        let inner = q.strip_prefix("label_values(").and_then(|q| q.strip_suffix(')')).expect("label_values(...)");
        let (selector, label) = inner.rsplit_once(',').expect("label_values(metric, label)");
        out.push((
            format!("variable {:?}", v["name"].as_str().unwrap_or_default()),
            selector.to_owned(),
            BTreeSet::from([label.trim().to_owned()]),
        ));
    }
    out
}

/// Every problem of `queries` (place, expression, labels asked for) against `exported`.
pub fn expr_problems(
    queries: Vec<(String, String, BTreeSet<String>)>,
    exported: &Exported,
    prefix: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (place, expr, asked) in queries {
        let (uses, grouping) = parse_expr(&expr, prefix);
        if uses.is_empty() {
            problems.push(format!("{place}: no {prefix} metric in {expr:?}"));
        }
        let mut available = BTreeSet::new();
        for u in &uses {
            // `_bucket`/`_sum`/`_count` are samples of a histogram family; the family itself must be one too.
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| u.metric.strip_suffix(s));
            if let Some(family) = family {
                if !exported.contains_key(&format!("{family}_bucket")) {
                    problems.push(format!("{place}: {} is not part of an exported histogram", u.metric));
                }
            }
            let Some(labels) = exported.get(&u.metric) else {
                problems.push(format!("{place}: metric {} not exported", u.metric));
                continue;
            };
            for l in u.selector_labels.difference(labels).filter(|l| !SCRAPE_LABELS.contains(&l.as_str())) {
                problems.push(format!("{place}: {} has no label {l:?} (it has {labels:?})", u.metric));
            }
            available.extend(labels.iter().cloned());
        }
        available.extend(SCRAPE_LABELS.map(str::to_owned));
        if !uses.is_empty() {
            for l in grouping.union(&asked).filter(|l| !available.contains(*l)) {
                problems.push(format!("{place}: grouping/variable label {l:?} not on any metric of {expr:?}"));
            }
        }
    }
    problems
}
